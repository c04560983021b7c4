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

``--before RUN`` stands a recorded run of the entry in for step 4's BEFORE repro
(kvdiag.engine.verify.reuse says when that is honest); it is checked before anything is
built, and the AFTER arm then runs as many times as it did unless ``--runs`` says.
For an entry run several times (D3) both arms' k/N are compared with Fisher's exact
test, and a fix is not called verified when the two rates cannot be told apart.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

from kvdiag.engine.verdict.arm import arm_record
from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.plan import pick_step
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.errors import RunInterrupted
from kvdiag.engine.verify.numeric import NUMERIC_STEP, NumericResult, numeric_step, run_numeric
from kvdiag.workspace.scratch_build import BuildRecipe, BuildTimes, build_tree
from kvdiag.engine.verify.reuse import LATEST, ReusedRun, reuse_before
from kvdiag.engine.verdict.target import Target, prepare_target
from kvdiag.records.verdict import Outcome, Verdict
from kvdiag.errors import UsageError
from kvdiag.exitcodes import ExitCode
from kvdiag.probes.patch import Probe, ProbeError
from kvdiag.probes.worktree import (
    Worktree,
    apply_stack,
    porcelain_status,
    repo_toplevel,
    resolve_commit,
    scratch_worktree,
)
from kvdiag.progress import Progress
from kvdiag.records.rates import Rate, fisher_exact_two_sided
from kvdiag.records.run import RunRecord, target_record
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir, RunStore



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
    reused: ReusedRun | None = None       # the recorded run that stands in for this arm (--before)
    numeric_possible: bool = True         # the entry has a step the numeric test can run

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
                "run_s": _round(self.outcome.duration_s), "k": self.outcome.k, "n": self.outcome.n,
                "reused": self.reused.to_dict() if self.reused else None, "outcome": self.outcome.to_dict()}


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

    @property
    def rates(self) -> RateComparison | None:
        """For an entry run several times (a flaky defect such as D3): both rates with their intervals
        and whether they differ; None when either side ran once."""
        return compare_rates(self.before.outcome.rate, self.after.outcome.rate)

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry_id, "probes": list(self.probes), "source": str(self.source),
                "commit": self.commit, "before": self.before.to_dict(), "after": self.after.to_dict(),
                "conclusion": self.conclusion.value, "headline": self.headline or self.conclusion.value,
                "explanation": self.explanation,
                "exit_code": self.exit_code, "source_status_unchanged": self.status_unchanged,
                **({"rates": self.rates.to_dict()} if self.rates else {}),
                "source_status_before": self.status_before, "source_status_after": self.status_after,
                "kept": [str(p) for p in self.kept], "warnings": list(self.warnings),
                "session_dir": str(self.session_dir) if self.session_dir else None}


@dataclass(frozen=True)
class RateComparison:
    """Before and after rates of a flaky entry, and Fisher's exact test between them."""

    before: Rate
    after: Rate
    p_value: float

    @property
    def differ(self) -> bool:
        return self.p_value < 0.05

    @property
    def text(self) -> str:
        verdict = ("the rates differ" if self.differ else
                   "no difference shown: the runs cannot tell these rates apart")
        return (f"before {self.before.text}, after {self.after.text}; Fisher's exact test p = {self.p_value:.3g}: "
                f"{verdict}")

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before.to_dict(), "after": self.after.to_dict(), "p_value": round(self.p_value, 4),
                "differ": self.differ, "test": "fisher-exact-two-sided"}


def compare_rates(before: Rate | None, after: Rate | None) -> RateComparison | None:
    if before is None or after is None:
        return None
    return RateComparison(before, after, fisher_exact_two_sided(before.k, before.n, after.k, after.n))


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
    rates = compare_rates(before.outcome.rate, after.outcome.rate)
    if rates is not None and not rates.differ:
        return Conclusion.INCONCLUSIVE, (f"the signature did not match after the fix, but the runs cannot tell the "
                                         f"two rates apart ({rates.before.k}/{rates.before.n} before, "
                                         f"{rates.after.k}/{rates.after.n} after; Fisher's exact test p = {rates.p_value:.3g}): more runs (--runs N) "
                                         f"can")
    if not after.numeric:
        return Conclusion.INCONCLUSIVE, ("the signature is gone, but results were not checked: the entry has no "
                                         "numeric step (give --numeric-params)" if after.numeric_possible else
                                         "the signature is gone, but results were not checked: the entry has no "
                                         "test-backend-ops step to check them with")
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
    runs: int | None = None             # runs of each arm (of AFTER alone when BEFORE is reused)
    before_run: str | None = None       # a recorded run (id, prefix or "latest") that is the BEFORE arm


@dataclass
class _Verification:
    """What the parts of one verification share."""

    request: VerifyRequest
    store: RunStore
    home: Path
    logs: Path
    progress: Progress
    session_id: str
    warnings: list[str]
    reused: ReusedRun | None = None
    before_target: Target | None = None     # the user's build, inspected to check the reused run against it


def verify_fix(request: VerifyRequest, *, home: Path, progress: Progress | None = None) -> VerifyReport:
    """Run the whole verification; the scratch worktrees and builds are removed unless ``keep``.

    Raises ProbeError (a probe does not apply), BuildFailed, UsageError, ArmMismatch (``before_run``
    is not the arm verify would run, raised before anything is built); Ctrl-C is a KeyboardInterrupt
    after the worktrees were removed.
    """
    progress = progress or Progress()
    entry = request.entry
    store = RunStore(home)
    reused, before_target = _check_reuse(request, store, home, progress) if request.before_run else (None, None)
    running = RunRecord(entry=f"{entry.id}-verify", status="running", kind="verify",
                        fields={"probes": [p.name for p in request.stack], "source": str(request.source),
                                **({"before_run": reused.run_id} if reused else {})})
    session = store.create(f"{entry.id}-verify", running)
    logs = session.logs
    source = repo_toplevel(request.source, logs)
    commit = resolve_commit(source, request.commit, logs)
    v = _Verification(request, store, home, logs, progress, session.run_id, _stack_warnings(entry, request.stack),
                      reused, before_target)
    status_before = porcelain_status(source, logs)
    scratch_root = Path(tempfile.mkdtemp(prefix=f"kvdiag-verify-{entry.id}-"))
    kept: list[Path] = []
    try:
        before, after = _both_sides(v, source, commit, scratch_root)
        if request.keep:
            kept.append(scratch_root)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        session.write_record(running.with_status(status, error=f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if not request.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    status_after = porcelain_status(source, logs)
    sanitizer_signature = any(m.type == "sanitizer" for m in entry.signature)
    conclusion, explanation = conclude(before, after)
    report = VerifyReport(entry.id, tuple(p.name for p in request.stack), source, commit, before, after, conclusion,
                          explanation, status_before == status_after, status_before, status_after, tuple(kept),
                          tuple(dict.fromkeys(v.warnings)), session.path,
                          headline(conclusion, sanitizer_signature=sanitizer_signature))
    session.write_record(running.with_status("finished", verify=report.to_dict()))
    return report


def _check_reuse(request: VerifyRequest, store: RunStore, home: Path,
                 progress: Progress) -> tuple[ReusedRun, Target]:
    """The recorded run ``--before`` names, checked against the user's build as it is now: before a
    worktree is made or a build started, so a refusal costs seconds, not a build."""
    if request.build_dir is None:
        raise UsageError("--before needs --build: a recorded run is reused only against the build it ran on")
    entry = request.entry
    target = _inspect_target("before", request.build_dir, request, store, home, progress)
    now = arm_record(entry, pick_step(entry, request.step), target, runs=0, overrides={})
    reused = reuse_before(store, entry, request.before_run or LATEST, now)
    progress.say(f"before: reusing run {reused.run_id}: {reused.outcome.verdict.value}, "
                 f"{reused.outcome.k_of_n} runs")
    return reused, target


def _both_sides(v: _Verification, source: Path, commit: str, scratch_root: Path) -> tuple[Side, Side]:
    """Worktree + probes, scratch build, then BEFORE and AFTER (and a pristine build when no --build)."""
    request = v.request
    with scratch_worktree(source, commit, log_dir=v.logs, path=scratch_root / "src", keep=request.keep) as wt:
        _apply_or_fail(wt, request.stack)
        after_build = scratch_root / "build"
        after_times = build_tree(request.recipe, wt.path, after_build, log_dir=v.logs, label="after",
                                 progress=v.progress)
        if request.build_dir is None:
            before_build = scratch_root / "build-before"
            with scratch_worktree(source, commit, log_dir=v.logs, path=scratch_root / "src-before",
                                  keep=request.keep) as pristine:
                before_times = build_tree(request.recipe, pristine.path, before_build, log_dir=v.logs,
                                          label="before", progress=v.progress)
                before = _side(v, "before", before_build, before_times, runs=request.runs)
            v.warnings.append("no --build given: BEFORE is a pristine scratch build of the same commit")
        else:
            v.warnings.extend(_reference_warnings(request.recipe.reference, commit))
            before = (_reused_side(v, request.build_dir) if v.reused is not None else
                      _side(v, "before", request.build_dir, BuildTimes(), runs=request.runs))
        after_runs = request.runs or (v.reused.runs if v.reused is not None else None)
        after = _side(v, "after", after_build, after_times, runs=after_runs)
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


def _inspect_target(label: str, build_dir: Path, request: VerifyRequest, store: RunStore, home: Path,
                    progress: Progress) -> Target:
    setup = store.create(f"target-{label}", RunRecord(entry="target", status="running"))
    progress.say(f"{label}: inspecting {build_dir}")
    target = prepare_target(build_dir, log_dir=setup.logs, sanitizer=request.sanitizer,
                            check_staleness=label == "before", home=home)
    setup.write_record(target_record(target.to_dict()))
    return target


def _side(v: _Verification, label: str, build_dir: Path, times: BuildTimes, *, runs: int | None) -> Side:
    """The entry's repro and the numeric test against one build, recorded in the run store (the run
    names its arm and this verification, so that `kvdiag report` never takes a patched arm for the
    entry's run)."""
    request, entry = v.request, v.request.entry
    target = _inspect_target(label, build_dir, request, v.store, v.home, v.progress)
    gate_provider = controls_gate_provider(v.home, target, v.logs)
    run_dir = v.store.create(entry.id)
    marker = {"verify_arm": {"arm": label, "verify_run": v.session_id, "probes": [p.name for p in request.stack]}}
    options = RunOptions(step=request.step, runs=runs, progress=v.progress, overrides={}, record=marker)
    try:
        outcome = run_entry(entry, target, run_dir, options=options, gate_provider=gate_provider)
    except RunInterrupted:
        raise KeyboardInterrupt from None
    v.progress.say(f"{label}: {outcome.verdict.value}: {outcome.reason}")
    numeric = _numeric(entry, request, target, run_dir)
    run_dir.write("numeric.json", [n.to_dict() for n in numeric])
    return Side(label, Path(build_dir), outcome, numeric, run_dir.path, times.configure_s, times.build_s,
                numeric_possible=numeric_step(entry) is not None)


def _reused_side(v: _Verification, build_dir: Path) -> Side:
    """BEFORE from the recorded run; the numeric test (seconds, not a repro) still runs on the build now."""
    request, entry, reused = v.request, v.request.entry, v.reused
    assert reused is not None and v.before_target is not None
    v.progress.say(f"before: {reused.outcome.verdict.value}: {reused.outcome.reason} (recorded in run "
                   f"{reused.run_id}, not run again)")
    numeric: tuple[NumericResult, ...] = ()
    if numeric_step(entry) is not None and (entry.step(NUMERIC_STEP) is not None or request.numeric_params):
        label = f"{entry.id}-numeric"
        run_dir = v.store.create(label, RunRecord(entry=label, status="running", kind="numeric"))
        numeric = _numeric(entry, request, v.before_target, run_dir)
        run_dir.write_record(RunRecord(entry=label, status="finished", kind="numeric",
                                       fields={"numeric": [n.to_dict() for n in numeric], "verify_run": v.session_id}))
    return Side("before", Path(build_dir), reused.outcome, numeric, reused.run_dir, reused=reused,
                numeric_possible=numeric_step(entry) is not None)


def _numeric(entry: Entry, request: VerifyRequest, target: Target, run_dir: RunDir) -> tuple[NumericResult, ...]:
    """The numeric test: the entry's ``numeric`` step, and its step over ``--numeric-params``."""
    numeric: list[NumericResult] = []
    step = numeric_step(entry)
    if step is not None:
        if entry.step(NUMERIC_STEP) is not None:
            numeric.append(run_numeric(entry, step, target, run_dir))
        if request.numeric_params is not None:
            numeric.append(run_numeric(entry, step, target, run_dir, params=request.numeric_params))
    return tuple(numeric)


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None
