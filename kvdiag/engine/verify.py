"""Fix verification: the entry's repro before and after a fix probe, and the numeric test.

``kvdiag verify D2 --source SRC --probe D2-fix-uniform-barrier --build BUILD``:

1. a scratch worktree of SRC at the commit, with the probe stack applied
   (a probe that does not apply stops here, the worktree removed);
2. a scratch build of it, configured the way the user's own build is (its
   CMakeCache: generator, build type, CUDA architectures and flags, every
   GGML_*/LLAMA_* option) or with the user's ``--configure-cmd``; kvdiag holds
   no build recipe of its own;
3. built with ``--build-cmd`` or ``cmake --build`` of the entry's binaries;
4. the entry's repro BEFORE (the user's build) and AFTER (the scratch build),
   recorded in the run store like any run;
5. the numeric test of the touched op before and after: the entry's step named
   ``numeric`` (optionally widened with ``--numeric-params``), run as a plain
   process and read with the test-backend-ops parser;
6. a conclusion: "fix verified" only when the defect was confirmed before, is
   not reproduced after, and the numeric test passed with at least one case
   executed after the fix;
7. ``git status --porcelain`` of SRC is compared before and after: the user's
   tree is never touched, and the report says so.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvdiag.engine.execute import RunInterrupted, RunOptions, run_entry
from kvdiag.engine.gates import controls_gate_provider
from kvdiag.engine.planning import TemplateProblem, render_step, template_context
from kvdiag.engine.progress import Progress
from kvdiag.engine.target import Target, prepare_target
from kvdiag.engine.verdict import Outcome, Verdict
from kvdiag.errors import KvdiagError, UsageError
from kvdiag.exitcodes import ExitCode
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.probes.patch import Probe, ProbeError
from kvdiag.probes.worktree import (
    Worktree,
    apply_stack,
    porcelain_status,
    resolve_commit,
    repo_toplevel,
    scratch_worktree,
)
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, CommandResult, run_command
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir, RunStore

CONFIGURE_TIMEOUT_S = 1800.0
BUILD_TIMEOUT_S = 4 * 3600.0
TAIL_LINES = 30
NUMERIC_STEP = "numeric"
# Cache entries never passed on: they describe the old tree and build, not the configuration.
_NOT_OPTIONS = re.compile(r"(_SOURCE_DIR|_BINARY_DIR|_IS_TOP_LEVEL)$")
_CACHE_TYPED = re.compile(r'^(?:"(?P<q>[^"]*)"|(?P<k>[^:="]+)):(?P<type>[A-Za-z]+)=')
_COMPILERS = ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_CUDA_COMPILER")


# --------------------------------------------------------------------------- building


class BuildFailed(KvdiagError):
    """Configuring or building a scratch tree failed; carries the tail of its log."""

    def __init__(self, phase: str, result: CommandResult | None, message: str, tail: Sequence[str] = ()):
        super().__init__(message)
        self.phase = phase
        self.result = result
        self.tail = tuple(tail)
        self.log = result.combined_path if result is not None else None

    def report(self) -> str:
        lines = [str(self)]
        if self.log is not None:
            lines.append(f"log: {self.log}")
        if self.tail:
            lines.append(f"last {len(self.tail)} line(s):")
            lines.extend(f"  {line}" for line in self.tail)
        return "\n".join(lines)


def substitute(command: str, values: Mapping[str, str]) -> list[str]:
    """``shlex.split`` a user's command, then put ``{source}``, ``{build}``, ``{jobs}`` into each argument.

    Splitting first keeps a path with spaces one argument; nothing goes through a shell.
    """
    try:
        args = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"cannot split the command {command!r}: {exc}") from None
    if not args:
        raise UsageError("an empty command was given")
    out = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


@dataclass(frozen=True)
class BuildRecipe:
    """How a scratch tree is configured and built: the user's commands or the user's own build's configuration."""

    configure_cmd: str | None = None
    build_cmd: str | None = None
    reference: Any = None                 # BuildInfo of the user's build, whose configuration is reused
    targets: tuple[str, ...] = ()
    jobs: int | None = None
    configure_timeout: float = CONFIGURE_TIMEOUT_S
    build_timeout: float = BUILD_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.configure_cmd is None and self.build_cmd is None and self.reference is None:
            raise UsageError("nothing says how to build the scratch tree: give --build (reuse that build's "
                             "configuration) or --configure-cmd/--build-cmd")
        if self.configure_cmd is None and self.build_cmd is None and self.reference.cache_path is None:
            raise UsageError(f"{self.reference.build_dir} has no CMakeCache.txt to reuse: "
                             "give --configure-cmd and --build-cmd")

    def values(self, source: Path, build: Path) -> dict[str, str]:
        return {"source": str(source), "build": str(build), "jobs": str(self.jobs or os.cpu_count() or 1)}

    def configure_argv(self, source: Path, build: Path) -> list[str] | None:
        """The configure command, or None when only a build command was given."""
        if self.configure_cmd is not None:
            return substitute(self.configure_cmd, self.values(source, build))
        if self.reference is None or self.reference.cache_path is None:
            return None
        return cmake_configure_argv(self.reference, source, build)

    def build_argv(self, source: Path, build: Path) -> list[str]:
        if self.build_cmd is not None:
            return substitute(self.build_cmd, self.values(source, build))
        argv = ["cmake", "--build", str(build)]
        if self.targets:
            argv += ["--target", *self.targets]
        return argv + ["-j", str(self.jobs or os.cpu_count() or 1)]


def cache_types(cache_path: Path | None) -> dict[str, str]:
    """{KEY: TYPE} of a CMakeCache.txt (INTERNAL and STATIC entries are not options)."""
    if cache_path is None:
        return {}
    types: dict[str, str] = {}
    try:
        text = Path(cache_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    for line in text.splitlines():
        m = _CACHE_TYPED.match(line.strip())
        if m:
            types[m.group("q") if m.group("q") is not None else m.group("k").strip()] = m.group("type").upper()
    return types


def cmake_configure_argv(build, source: Path, scratch: Path) -> list[str]:
    """``cmake -S source -B scratch`` with the user's build's own configuration (from its CMakeCache)."""
    from kvdiag.target.build import read_cmake_cache

    argv = ["cmake", "-S", str(source), "-B", str(scratch)]
    if build.generator:
        argv += ["-G", build.generator]
    cache = read_cmake_cache(build.cache_path) if build.cache_path is not None else {}
    if build.build_type:
        argv.append(f"-DCMAKE_BUILD_TYPE={build.build_type}")
    if build.cuda_architectures:
        argv.append(f"-DCMAKE_CUDA_ARCHITECTURES={build.cuda_architectures}")
    if build.cuda_flags:
        argv.append(f"-DCMAKE_CUDA_FLAGS={build.cuda_flags}")
    for key in _COMPILERS:
        value = (cache.get(key) or "").strip()
        if value and not value.endswith("-NOTFOUND"):
            argv.append(f"-D{key}:FILEPATH={value}")
    types = cache_types(build.cache_path)
    for key, value in sorted(build.options.items()):
        kind = types.get(key)
        if _NOT_OPTIONS.search(key) or kind in ("INTERNAL", "STATIC"):
            continue
        # With its type: an untyped relative PATH value (GGML_BIN_INSTALL_DIR=bin) would be made
        # absolute against cmake's working directory.
        argv.append(f"-D{key}:{kind}={value}" if kind else f"-D{key}={value}")
    return argv


@dataclass(frozen=True)
class BuildTimes:
    configure_s: float | None = None
    build_s: float | None = None


def build_tree(recipe: BuildRecipe, source: Path, build: Path, *, log_dir: Path, label: str,
               progress: Progress | None = None) -> BuildTimes:
    """Configure (when there is a configure command) and build; BuildFailed with the log's tail on failure."""
    build.mkdir(parents=True, exist_ok=True)
    progress = progress or Progress(enabled=False)
    times: dict[str, float] = {}
    steps = [("configure", recipe.configure_argv(source, build), recipe.configure_timeout),
             ("build", recipe.build_argv(source, build), recipe.build_timeout)]
    for phase, argv, timeout in steps:
        if argv is None:
            continue
        progress.say(f"{label}: {phase}: {shlex.join(argv[:8])}{' …' if len(argv) > 8 else ''}")
        started = time.monotonic()
        try:
            result = run_command(argv, timeout=timeout, log_dir=log_dir, name=f"{label}-{phase}", cwd=source)
        except CommandNotFound as exc:
            raise BuildFailed(phase, None, f"{label}: cannot {phase}: {exc}") from None
        except CommandInterrupted:
            raise KeyboardInterrupt from None
        times[phase] = time.monotonic() - started
        if not result.ok:
            tail = [ln for ln in result.combined_text().splitlines() if ln.strip()][-TAIL_LINES:]
            raise BuildFailed(phase, result, f"{label}: {phase} failed ({result.describe()}): {shlex.join(argv)}",
                              tail)
    return BuildTimes(times.get("configure"), times.get("build"))


# --------------------------------------------------------------------------- numeric test


@dataclass(frozen=True)
class NumericResult:
    """One plain (unsanitized) run of the numeric test step, parsed."""

    label: str                     # "numeric" or "numeric /hsk=256/"
    params: str | None
    executed: int = 0
    passed: int = 0
    failed: int = 0
    not_supported: int = 0
    finished: bool = False
    exit: str = ""
    process_ok: bool = False
    duration_s: float = 0.0
    log: str | None = None
    problem: str | None = None     # it could not run (no binary, a template problem)
    failures: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.problem is None

    @property
    def ok(self) -> bool:
        """Every executed case OK, at least one executed, and the program ended normally."""
        return self.ran and self.executed >= 1 and self.failed == 0 and self.process_ok

    def cell(self) -> str:
        if not self.ran:
            return f"not run: {self.problem}"
        text = f"{self.passed} OK / {self.failed} FAIL"
        if self.executed == 0:
            text += " (0 executed)"
        if not self.process_ok:
            text += f" ({self.exit})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "params": self.params, "executed": self.executed, "passed": self.passed,
                "failed": self.failed, "not_supported": self.not_supported, "finished": self.finished,
                "exit": self.exit, "process_ok": self.process_ok, "ok": self.ok,
                "duration_s": round(self.duration_s, 3), "log": self.log, "problem": self.problem,
                "failures": list(self.failures)}


def numeric_step(entry: Entry) -> Step | None:
    """The entry's ``numeric`` step; else its default step when that is a test-backend-ops step."""
    step = entry.step(NUMERIC_STEP)
    if step is not None:
        return step
    default = entry.default_step
    return default if default.kind == "backend-ops" else None


def run_numeric(entry: Entry, step: Step, target: Target, run_dir: RunDir, *, params: str | None = None,
                label: str = NUMERIC_STEP) -> NumericResult:
    """Run ``step`` as a plain process (no sanitizer, no signature) and count OK/FAIL cases."""
    build = target.build
    overrides = {"params": params} if params is not None else {}
    shown = f"{label} /{params}/" if params is not None else label
    try:
        context = template_context(entry, step, binaries=build.binaries if build else {},
                                   build_dir=build.build_dir if build else None,
                                   source_dir=build.source_dir if build else None,
                                   scratch=run_dir.scratch, overrides=overrides)
        planned = render_step(step, context)
    except TemplateProblem as exc:
        return NumericResult(shown, params, problem=str(exc))
    if not planned.commands:
        return NumericResult(shown, params, problem=f"step {step.name!r} has no command")
    stdout, results = [], []
    started = time.monotonic()
    for j, argv in enumerate(planned.commands):
        name = f"{label}-{j + 1}" if params is None else f"{label}-wide-{j + 1}"
        try:
            result = run_command(list(argv), timeout=step.timeout, log_dir=run_dir.logs, name=name,
                                 env_overrides=planned.env or None, tty=step.tty)
        except CommandNotFound as exc:
            return NumericResult(shown, params, problem=str(exc))
        except CommandInterrupted:
            raise KeyboardInterrupt from None
        results.append(result)
        stdout.append(result.stdout_text())
        if not result.ok:
            break
    report = parse_backend_ops("".join(stdout))
    last = results[-1]
    return NumericResult(
        label=shown, params=params, executed=report.executed, passed=report.passed, failed=report.failed,
        not_supported=report.not_supported, finished=report.finished, exit=last.describe(),
        process_ok=all(r.ok for r in results), duration_s=time.monotonic() - started, log=str(last.combined_path),
        failures=tuple(c.case_string for c in report.failures()[:10]),
    )


# --------------------------------------------------------------------------- the verification


class Conclusion(str, Enum):
    VERIFIED = "fix verified"
    BREAKS_RESULTS = "fix silences the signature but breaks results"
    STILL_REPRODUCES = "not verified: the defect still reproduces with the fix"
    NOT_REPRODUCED_BEFORE = "not verified: the defect does not reproduce before the fix"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        return {Conclusion.VERIFIED: int(ExitCode.OK), Conclusion.BREAKS_RESULTS: int(ExitCode.CONFIRMED),
                Conclusion.STILL_REPRODUCES: int(ExitCode.CONFIRMED)}.get(self, int(ExitCode.INCONCLUSIVE))


@dataclass(frozen=True)
class Side:
    """BEFORE or AFTER: the build, its repro outcome, its numeric runs, and the wall times."""

    label: str
    build_dir: Path
    outcome: Outcome
    numeric: tuple[NumericResult, ...] = ()
    run_dir: Path | None = None
    configure_s: float | None = None
    build_s: float | None = None

    @property
    def verdict(self) -> Verdict:
        return self.outcome.verdict

    @property
    def error_count(self) -> int | None:
        counts = [a.evidence.error_count for a in self.outcome.attempts if a.evidence.error_count is not None]
        return max(counts) if counts else None

    @property
    def sites(self) -> tuple[str, ...]:
        seen: list[str] = []
        for attempt in self.outcome.attempts:
            for site in attempt.evidence.sites:
                label = str(site.get("site"))
                if label not in seen:
                    seen.append(label)
        return tuple(seen)

    @property
    def numeric_ok(self) -> bool:
        return bool(self.numeric) and all(n.ok for n in self.numeric)

    @property
    def numeric_executed(self) -> int:
        return sum(n.executed for n in self.numeric)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "build_dir": str(self.build_dir), "verdict": self.verdict.value,
                "reason": self.outcome.reason, "error_count": self.error_count, "sites": list(self.sites),
                "numeric": [n.to_dict() for n in self.numeric], "numeric_ok": self.numeric_ok,
                "run_dir": str(self.run_dir) if self.run_dir else None,
                "configure_s": _round(self.configure_s), "build_s": _round(self.build_s),
                "run_s": _round(self.outcome.duration_s), "outcome": self.outcome.to_dict()}


@dataclass(frozen=True)
class VerifyReport:
    entry_id: str
    probes: tuple[str, ...]
    source: Path
    commit: str
    before: Side
    after: Side
    conclusion: Conclusion
    explanation: str
    status_unchanged: bool
    status_before: str
    status_after: str
    kept: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = ()
    session_dir: Path | None = None
    headline: str = ""

    @property
    def exit_code(self) -> int:
        if not self.status_unchanged:
            return int(ExitCode.HARNESS)
        return self.conclusion.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry_id, "probes": list(self.probes), "source": str(self.source),
                "commit": self.commit, "before": self.before.to_dict(), "after": self.after.to_dict(),
                "conclusion": self.conclusion.value, "headline": self.headline or self.conclusion.value,
                "explanation": self.explanation,
                "exit_code": self.exit_code, "source_status_unchanged": self.status_unchanged,
                "source_status_before": self.status_before, "source_status_after": self.status_after,
                "kept": [str(p) for p in self.kept], "warnings": list(self.warnings),
                "session_dir": str(self.session_dir) if self.session_dir else None}


def headline(conclusion: Conclusion, *, sanitizer_signature: bool) -> str:
    """The conclusion's line; a sanitizer-based signature says "sanitizer" where the rule says "signature"."""
    if conclusion is Conclusion.BREAKS_RESULTS and sanitizer_signature:
        return "fix silences the sanitizer but breaks results"
    return conclusion.value


def conclude(before: Side, after: Side) -> tuple[Conclusion, str]:
    """The rules of ``kvdiag verify``'s conclusion (see the module docstring)."""
    b, a = before.verdict, after.verdict
    if b is Verdict.NOT_REPRODUCED:
        return Conclusion.NOT_REPRODUCED_BEFORE, (
            f"before the fix the repro gave not-reproduced ({before.outcome.reason}): a fix cannot be judged on "
            "a build that does not show the defect")
    if b is not Verdict.CONFIRMED:
        return Conclusion.INCONCLUSIVE, f"the run before the fix was {b.value}: {before.outcome.reason}"
    if a is Verdict.CONFIRMED:
        return Conclusion.STILL_REPRODUCES, f"after the fix: {after.outcome.reason}"
    # The signature no longer matches. Broken numerics after the fix outrank an odd AFTER run: a test
    # program exits non-zero when cases FAIL, which alone makes the AFTER repro inconclusive.
    broken = [n for n in after.numeric if n.ran and (n.failed or not n.process_ok)]
    if broken:
        first = broken[0]
        what = f"{first.label}: {first.failed} case(s) FAIL" if first.failed else f"{first.label}: {first.exit}"
        if first.failures:
            what += f" (first: {first.failures[0]})"
        if any(n.label == first.label and n.ran and (n.failed or not n.process_ok) for n in before.numeric):
            return Conclusion.INCONCLUSIVE, (f"the signature is gone, but the numeric test fails before and after "
                                             f"the fix ({what}): results cannot be judged")
        if a is not Verdict.NOT_REPRODUCED:
            what += f"; the repro after the fix was {a.value}: {after.outcome.reason}"
        return Conclusion.BREAKS_RESULTS, what
    if a is not Verdict.NOT_REPRODUCED:
        return Conclusion.INCONCLUSIVE, f"the run after the fix was {a.value}: {after.outcome.reason}"
    if not after.numeric:
        return Conclusion.INCONCLUSIVE, ("the signature is gone, but results were not checked: the entry has no "
                                         "numeric step (give --numeric-params)")
    not_run = [n for n in after.numeric if not n.ran]
    if not_run:
        return Conclusion.INCONCLUSIVE, f"the signature is gone, but the numeric test did not run: {not_run[0].problem}"
    if after.numeric_executed < 1:
        return Conclusion.INCONCLUSIVE, "the signature is gone, but the numeric test executed no case"
    return Conclusion.VERIFIED, (f"confirmed before ({before.outcome.reason}); not reproduced after; numeric test "
                                 f"passed after the fix ({after.numeric_executed} case(s) executed, 0 FAIL)")


@dataclass(frozen=True)
class VerifyRequest:
    entry: Entry
    source: Path
    stack: tuple[Probe, ...]
    recipe: BuildRecipe
    build_dir: Path | None = None       # the user's build: BEFORE runs against it
    commit: str = "HEAD"
    keep: bool = False
    numeric_params: str | None = None
    sanitizer: Path | None = None
    step: str | None = None


def verify_fix(request: VerifyRequest, *, home: Path, progress: Progress | None = None) -> VerifyReport:
    """Run the whole verification; the scratch worktrees and builds are removed unless ``keep``.

    Raises ProbeError (a probe does not apply), BuildFailed, UsageError; Ctrl-C is a KeyboardInterrupt
    after the worktrees were removed.
    """
    progress = progress or Progress(enabled=False)
    entry = request.entry
    store = RunStore(home)
    session = store.create(f"{entry.id}-verify")
    logs = session.logs
    header = {"entry": f"{entry.id}-verify", "kind": "verify", "probes": [p.name for p in request.stack],
              "source": str(request.source)}
    session.write("run.json", {**header, "status": "running"})
    source = repo_toplevel(request.source, logs)
    commit = resolve_commit(source, request.commit, logs)
    warnings = _stack_warnings(entry, request.stack)
    status_before = porcelain_status(source, logs)
    scratch_root = Path(tempfile.mkdtemp(prefix=f"kvdiag-verify-{entry.id}-"))
    kept: list[Path] = []
    try:
        before, after = _both_sides(request, source, commit, scratch_root, store, home, logs, progress, warnings)
        if request.keep:
            kept.append(scratch_root)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        session.write("run.json", {**header, "status": status, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        if not request.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    status_after = porcelain_status(source, logs)
    sanitizer_signature = any(m.type == "sanitizer" for m in entry.signature)
    conclusion, explanation = conclude(before, after)
    report = VerifyReport(entry.id, tuple(p.name for p in request.stack), source, commit, before, after, conclusion,
                          explanation, status_before == status_after, status_before, status_after, tuple(kept),
                          tuple(dict.fromkeys(warnings)), session.path,
                          headline(conclusion, sanitizer_signature=sanitizer_signature))
    session.write("run.json", {**header, "status": "finished", "verify": report.to_dict()})
    return report


def _both_sides(request: VerifyRequest, source: Path, commit: str, scratch_root: Path, store: RunStore,
                home: Path, logs: Path, progress: Progress, warnings: list[str]) -> tuple[Side, Side]:
    """Worktree + probes, scratch build, then BEFORE and AFTER (and a pristine build when no --build)."""
    entry = request.entry
    with scratch_worktree(source, commit, log_dir=logs, path=scratch_root / "src", keep=request.keep) as wt:
        _apply_or_fail(wt, request.stack)
        after_build = scratch_root / "build"
        after_times = build_tree(request.recipe, wt.path, after_build, log_dir=logs, label="after",
                                 progress=progress)
        if request.build_dir is None:
            before_build = scratch_root / "build-before"
            with scratch_worktree(source, commit, log_dir=logs, path=scratch_root / "src-before",
                                  keep=request.keep) as pristine:
                before_times = build_tree(request.recipe, pristine.path, before_build, log_dir=logs,
                                          label="before", progress=progress)
                before = _side("before", entry, before_build, request, store, home, progress, before_times)
            warnings.append("no --build given: BEFORE is a pristine scratch build of the same commit")
        else:
            warnings.extend(_reference_warnings(request.recipe.reference, commit))
            before = _side("before", entry, request.build_dir, request, store, home, progress, BuildTimes())
        after = _side("after", entry, after_build, request, store, home, progress, after_times)
    return before, after


def _apply_or_fail(wt: Worktree, stack: Sequence[Probe]) -> None:
    failed = apply_stack(wt, stack)
    if failed is not None:
        lines = list(failed.errors) or [ln for ln in failed.output.splitlines() if ln.strip()][-1:]
        why = "; ".join(lines) or "git apply failed"
        raise ProbeError(f"probe {failed.probe.name} does not apply to {wt.commit[:12]}: {why}")


def _stack_warnings(entry: Entry, stack: Sequence[Probe]) -> list[str]:
    warnings = []
    for probe in stack:
        if probe.defect != entry.id:
            warnings.append(f"probe {probe.name} belongs to {probe.defect}, not {entry.id}")
    if not any(p.kind == "fix" for p in stack):
        warnings.append("no probe of the stack is a fix (kind: instrument): verifying it anyway")
    return warnings


def _reference_warnings(build, commit: str) -> list[str]:
    if build is None or build.git is None:
        return []
    out = []
    if build.git.commit != commit:
        out.append(f"the user's build is of {build.git.short}, the fix was applied to {commit[:12]}: "
                   "BEFORE and AFTER differ by more than the probes")
    if build.git.dirty:
        out.append(f"the user's build's source tree has {build.git.dirty_count} uncommitted change(s): "
                   "BEFORE includes them, AFTER does not")
    return out


def _side(label: str, entry: Entry, build_dir: Path, request: VerifyRequest, store: RunStore, home: Path,
          progress: Progress, times: BuildTimes) -> Side:
    """The entry's repro and the numeric test against one build, recorded in the run store."""
    setup = store.create(f"target-{label}")
    progress.say(f"{label}: inspecting {build_dir}")
    target = prepare_target(build_dir, log_dir=setup.logs, sanitizer=request.sanitizer,
                            check_staleness=label == "before")
    setup.write("run.json", {"entry": "target", "status": "finished", "target": target.to_dict()})
    gate_provider = controls_gate_provider(home, target, setup.logs)
    run_dir = store.create(entry.id)
    options = RunOptions(step=request.step, progress=progress, overrides={})
    try:
        outcome = run_entry(entry, target, run_dir, options=options, gate_provider=gate_provider)
    except RunInterrupted:
        raise KeyboardInterrupt from None
    progress.say(f"{label}: {outcome.verdict.value}: {outcome.reason}")
    numeric: list[NumericResult] = []
    step = numeric_step(entry)
    if step is not None:
        if entry.step(NUMERIC_STEP) is not None:
            numeric.append(run_numeric(entry, step, target, run_dir))
        if request.numeric_params is not None:
            numeric.append(run_numeric(entry, step, target, run_dir, params=request.numeric_params))
    run_dir.write("numeric.json", [n.to_dict() for n in numeric])
    return Side(label, Path(build_dir), outcome, tuple(numeric), run_dir.path, times.configure_s, times.build_s)


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


# --------------------------------------------------------------------------- text


def render_report(report: VerifyReport) -> str:
    """The before/after table, the conclusion and what happened to the user's tree."""
    from tabulate import tabulate

    b, a = report.before, report.after
    stack = " + ".join(report.probes)
    rows = [
        ("build", _short_path(b.build_dir), _short_path(a.build_dir)),
        ("verdict", b.verdict.value, a.verdict.value),
        ("sanitizer errors", _dash(b.error_count), _dash(a.error_count)),
        ("sites", ", ".join(b.sites[:3]) or "-", ", ".join(a.sites[:3]) or "-"),
    ]
    labels = list(dict.fromkeys([n.label for n in b.numeric] + [n.label for n in a.numeric]))
    for label in labels:
        nb = next((n for n in b.numeric if n.label == label), None)
        na = next((n for n in a.numeric if n.label == label), None)
        rows.append((label, nb.cell() if nb else "-", na.cell() if na else "-"))
    if not labels:
        rows.append(("numeric", "not run (no numeric step)", "not run (no numeric step)"))
    rows += [
        ("configure", _secs(b.configure_s), _secs(a.configure_s)),
        ("build", _secs(b.build_s), _secs(a.build_s)),
        ("repro run", _secs(b.outcome.duration_s), _secs(a.outcome.duration_s)),
    ]
    for label in labels:
        nb = next((n for n in b.numeric if n.label == label), None)
        na = next((n for n in a.numeric if n.label == label), None)
        rows.append((f"{label} run", _secs(nb.duration_s if nb and nb.ran else None),
                     _secs(na.duration_s if na and na.ran else None)))
    lines = [f"kvdiag verify {report.entry_id}: {stack} on {report.commit[:12]}", ""]
    lines.append(tabulate(rows, headers=["", "before", f"after (+ {stack})"]))
    lines.append("")
    lines.append(f"before: {b.outcome.reason}")
    lines.append(f"after:  {a.outcome.reason}")
    lines.append("")
    lines.append(f"conclusion: {report.headline or report.conclusion.value}")
    lines.append(f"  {report.explanation}")
    if report.status_unchanged:
        lines.append(f"source tree: untouched (git status --porcelain of {report.source} identical before and after)")
    else:
        lines.append(f"source tree: CHANGED during the run (git status --porcelain of {report.source} differs); "
                     "kvdiag does not write there: check what else ran")
        lines.append("  before: " + (report.status_before.replace("\n", "; ") or "(clean)"))
        lines.append("  after:  " + (report.status_after.replace("\n", "; ") or "(clean)"))
    if report.kept:
        lines.append("kept (--keep): " + ", ".join(str(p) for p in report.kept))
    else:
        lines.append("scratch worktree and build removed")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    lines.append(f"runs: {b.run_dir}  {a.run_dir}")
    return "\n".join(lines) + "\n"


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _short_path(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 48 else "…" + text[-47:]
