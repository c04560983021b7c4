"""Is a build current with its sources? The D13 check every verdict carries.

Answered by the build tool's own dry run (``ninja -n``, ``make -n`` for CMake
Makefiles, ``make -q`` for plain ones): the tool knows its dependency graph.
Tool trouble is an unknown answer, never an exception.

A dry run also lists steps that run on every build and say nothing about the
sources: CMake's ``add_custom_target`` (llama.cpp's "Provisioning UI assets")
and everything ninja cannot know its restat will spare. ninja's ``-d explain``
names the cause of each dirty edge; steps whose only causes are such commands
are ignored and listed as ignored, with the proof (`ninja_explain`), after the
steps behind them have been re-checked against their own inputs
(`ninja_recheck`). Two places compare timestamps with the tool's own data,
because the dry run cannot: those re-checks, and CMake Makefiles' compiler
depfiles that the next build folds in but ``make -n`` does not see yet
(`make_depfiles`). Plain ``make -q`` has no explanation to read: a FORCE-style
always-run target there makes every build look stale, and kvdiag cannot tell.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvdiag.parse.text import first_line
from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.workspace.staleness.make_depfiles import unconsolidated_causes
from kvdiag.workspace.staleness.ninja_explain import DirtyCause, classify_causes, dirty_nodes
from kvdiag.workspace.staleness.ninja_log import log_conflict
from kvdiag.workspace.staleness.ninja_recheck import recheck_behind

STALENESS_TIMEOUT_S = 60.0
MAX_LISTED = 20                  # pending steps kept in the record; pending_count says how many in all
_NINJA_EDGE = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\]\s?(?P<desc>.*)$")
_UNKNOWN_TARGET = re.compile(r"unknown target '(?P<t>[^']+)'|No rule to make target '(?P<m>[^']+)'")
_MAKE_STEP = re.compile(r'"(?P<msg>(?:Building|Linking|Generating)\b[^"]*)"\s*$')


@dataclass(frozen=True)
class Staleness:
    """Is the build current with its sources? ``stale`` is None when unknown."""

    checked: bool
    stale: bool | None
    tool: str | None  # "ninja -n" | "make -n" | "make -q"
    pending: tuple[str, ...]  # what would be rebuilt, at most MAX_LISTED lines
    detail: str
    pending_count: int = 0  # all build steps that would run
    causes: tuple[str, ...] = ()  # why the tool would rebuild (ninja's explanations that count)
    ignored: tuple[str, ...] = ()  # steps pending only because of always-run commands, at most MAX_LISTED
    ignored_because: tuple[str, ...] = ()  # the always-run commands behind `ignored`, with the proof
    program: str | None = None  # the build tool that ran (the build's own, CMAKE_MAKE_PROGRAM, or PATH's)
    # What the control (kvdiag.controls.staleness) showed this tool doing on this machine: a "current"
    # answer counts only with it (without, it is "not checked"); None for stale and unchecked answers.
    proof: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "stale": self.stale,
            "tool": self.tool,
            "program": self.program,
            "proof": self.proof,
            "pending": list(self.pending),
            "pending_count": self.pending_count,
            "detail": self.detail,
            "causes": list(self.causes),
            "ignored": list(self.ignored),
            "ignored_because": list(self.ignored_because),
        }

    def evidence_lines(self) -> list[str]:
        """What a verdict quotes: the summary, the causes, the pending steps, then what was ignored and why."""
        if not self.checked:
            return [self.detail]
        lines = [self.detail, *(f"because: {c}" for c in self.causes), *self.pending]
        lines += [f"ignored (always-run): {s}" for s in self.ignored]
        lines += [f"ignored because: {w}" for w in self.ignored_because]
        return lines


def not_checked(detail: str, tool: str | None = None, program: str | None = None) -> Staleness:
    return Staleness(checked=False, stale=None, tool=tool, pending=(), detail=detail, program=program)


def resolve_tool(program: str | None, name: str) -> str:
    """The tool to run: the build's own when known, else ``name`` on PATH (the bare name when absent,
    so that running it reports it missing)."""
    return program or shutil.which(name) or name


def _rel_target(build_dir: Path, path: Path) -> str:
    try:
        return path.relative_to(build_dir).as_posix()
    except ValueError:
        return str(path)


def _dry_run(
    tool: str,
    make_argv,  # (targets) -> argv
    targets: list[str],
    *,
    auto_targets: bool,
    log_dir: Path,
    env_overrides: Mapping[str, str],
):
    """Run a dry-run, dropping targets the tool does not know when they were guessed.

    Returns (result, targets used, dropped targets) or raises CommandNotFound.
    """
    dropped: list[str] = []
    attempt = 0
    while True:
        attempt += 1
        result = run_command(
            make_argv(targets),
            timeout=STALENESS_TIMEOUT_S,
            log_dir=log_dir,
            name=f"staleness-{tool.split()[0]}" + (f"-{attempt}" if attempt > 1 else ""),
            env_overrides=dict(env_overrides),
        )
        if result.timed_out or result.returncode in (0, None) or not auto_targets or attempt > 5:
            return result, targets, dropped
        unknown = [m.group("t") or m.group("m") for m in _UNKNOWN_TARGET.finditer(result.combined_text())]
        unknown = [u for u in unknown if u in targets]
        if not unknown:
            return result, targets, dropped
        dropped += unknown
        targets = [t for t in targets if t not in unknown]
        # with no known target left, fall back on the default target


def _checked_dry_run(tool: str, make_argv, targets: list[str], auto_targets: bool, log_dir: Path,
                     env_overrides: Mapping[str, str]):
    """`_dry_run`, with a missing tool or a timeout answered as a build whose currency is unknown.

    Returns (result, targets used, dropped targets), or the Staleness that says why it could not tell.
    """
    try:
        ran = _dry_run(tool, make_argv, targets, auto_targets=auto_targets, log_dir=log_dir,
                       env_overrides=env_overrides)
    except CommandNotFound as exc:
        return not_checked(f"{tool.split()[0]} not found, build currency unknown: {exc}", tool)
    if ran[0].timed_out:
        return not_checked(f"{tool} timed out after {STALENESS_TIMEOUT_S:g} s", tool)
    return ran


def _ninja_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path,
                     program: str | None = None) -> Staleness:
    tool = "ninja -n"
    ninja = resolve_tool(program, "ninja")
    conflict = log_conflict(build_dir, ninja)
    if conflict:
        return not_checked(conflict, tool, ninja)
    ran = _checked_dry_run(tool, lambda ts: [ninja, "-C", str(build_dir), "-n", "-d", "explain", *ts], targets,
                           auto, log_dir, {"NINJA_STATUS": "[%f/%t] ", "LC_ALL": "C"})
    if isinstance(ran, Staleness):
        return replace(ran, program=ninja)
    return replace(_ninja_answer(build_dir, ran, log_dir, ninja), program=ninja)


def _ninja_answer(build_dir: Path, ran, log_dir: Path, ninja: str) -> Staleness:
    """What ``ninja -n -d explain`` said, always-run commands discounted (see the module's text)."""
    tool = "ninja -n"
    result, used, dropped = ran
    text = result.combined_text()
    if result.returncode != 0:
        errors = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
        why = errors[0] if errors else (first_line(text) or result.describe())
        return not_checked(f"ninja -n failed: {why}", tool)
    edges = []
    for line in result.stdout_text().splitlines():
        m = _NINJA_EDGE.match(line.strip())
        if m:
            edges.append(m.group("desc").strip())
    scope = _scope(used, dropped)
    if not edges:
        return Staleness(checked=True, stale=False, tool=tool, pending=(),
                         detail=f"ninja: no work to do ({scope})")
    causes = classify_causes(text, build_dir)  # explanations go to stderr; both streams read
    counted = [c for c in causes if not c.always_run]
    always = [c for c in causes if c.always_run]
    if always and not counted:
        behind = recheck_behind(build_dir, dirty_nodes(text) | set(used),
                                {o for c in always for o in c.outputs}, log_dir, ninja)
        if behind.problem:
            return not_checked(f"{len(edges)} step(s) pending behind always-run command(s), and they could not be "
                               f"re-checked against their own inputs: {behind.problem}", tool)
        if not behind.causes:
            return _only_always_run(tool, edges, always, scope, behind.checked)
        counted = [DirtyCause(c) for c in behind.causes]
    if any(e.startswith("Re-running CMake") for e in edges):
        detail = (f"build.ninja would be regenerated (CMake re-run) before anything else; "
                  f"the steps after that are not listed ({scope})")
    else:
        detail = f"{len(edges)} build step(s) would run ({scope})"
    if always:
        detail += f"; {len(always)} always-run command(s) among them: " + "; ".join(c.describe() for c in always)
    return Staleness(checked=True, stale=True, tool=tool, pending=tuple(edges[:MAX_LISTED]),
                     detail=detail, pending_count=len(edges), causes=tuple(c.line for c in counted[:MAX_LISTED]))


def _only_always_run(tool: str, edges: list[str], always: list[DirtyCause], scope: str, rechecked: int) -> Staleness:
    """Every step ninja would run hangs off commands that run on every build: current with its sources."""
    commands = ", ".join(c.step or c.line for c in always)
    return Staleness(
        checked=True, stale=False, tool=tool, pending=(),
        detail=(f"ninja: nothing to rebuild against the sources ({scope}); {len(edges)} step(s) ignored, pending only "
                f"behind always-run command(s): {commands} ({rechecked} output(s) behind them re-checked against "
                f"their own inputs: none older)"),
        ignored=tuple(edges[:MAX_LISTED]), ignored_because=tuple(c.describe() for c in always),
    )


def _scope(used: Sequence[str], dropped: Sequence[str]) -> str:
    scope = "targets " + ", ".join(used) if used else "default target"
    if dropped:
        scope += "; not build targets: " + ", ".join(dropped)
    return scope


def _cmake_make_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path,
                          program: str | None = None) -> Staleness:
    make = resolve_tool(program, "make")
    return replace(_cmake_make_answer(build_dir, targets, auto, log_dir, make), program=make)


def _cmake_make_answer(build_dir: Path, targets: list[str], auto: bool, log_dir: Path, make: str) -> Staleness:
    # `make -q` cannot answer for CMake Makefiles: their top-level targets are .PHONY, so it
    # always says "out of date". A dry run prints, without running them, the
    # cmake_echo_color commands announcing each step ("Building CUDA object ...").
    tool = "make -n"
    ran = _checked_dry_run(tool, lambda ts: [make, "-n", "--no-print-directory", "-C", str(build_dir), *ts], targets,
                           auto, log_dir, {"LC_ALL": "C"})
    if isinstance(ran, Staleness):
        return ran
    result, used, dropped = ran
    if result.returncode != 0:
        text = result.combined_text()
        errors = [ln.strip() for ln in text.splitlines() if "***" in ln or "error" in ln.lower()]
        why = errors[0] if errors else (first_line(text) or result.describe())
        return not_checked(f"make -n failed: {why}", tool)
    steps = []
    for line in result.stdout_text().splitlines():
        if "cmake_echo_color" not in line:
            continue
        m = _MAKE_STEP.search(line.strip())
        if m:
            steps.append(m.group("msg"))
    scope = _scope(used, dropped)
    if not steps:
        read, causes = unconsolidated_causes(build_dir)
        if causes:
            return Staleness(checked=True, stale=True, tool=tool, pending=(), pending_count=len(causes),
                             detail=(f"make -n lists nothing ({scope}), but {len(causes)} object(s) are older than a "
                                     f"prerequisite in the compiler dependency files the next build reads"),
                             causes=tuple(causes[:MAX_LISTED]))
        seen = f"; {read} compiler dependency file(s) not yet folded in by CMake also checked" if read else ""
        return Staleness(checked=True, stale=False, tool=tool, pending=(),
                         detail=f"make: nothing to rebuild ({scope}; CMakeLists edits are not seen by a dry run{seen})")
    return Staleness(checked=True, stale=True, tool=tool, pending=tuple(steps[:MAX_LISTED]),
                     detail=f"{len(steps)} build step(s) would run ({scope})", pending_count=len(steps))


def _plain_make_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path,
                          program: str | None = None) -> Staleness:
    make = resolve_tool(program, "make")
    return replace(_plain_make_answer(build_dir, targets, auto, log_dir, make), program=make)


def _plain_make_answer(build_dir: Path, targets: list[str], auto: bool, log_dir: Path, make: str) -> Staleness:
    tool = "make -q"
    ran = _checked_dry_run(tool, lambda ts: [make, "-q", "-C", str(build_dir), *ts], targets, auto, log_dir,
                           {"LC_ALL": "C"})
    if isinstance(ran, Staleness):
        return ran
    result, used, dropped = ran
    scope = _scope(used, dropped)
    if result.returncode == 0:
        return Staleness(checked=True, stale=False, tool=tool, pending=(), detail=f"make -q: up to date ({scope})")
    if result.returncode == 1:
        return Staleness(checked=True, stale=True, tool=tool, pending=(),
                         detail=f"make -q: out of date ({scope})")
    why = first_line(result.combined_text()) or result.describe()
    return not_checked(f"make -q failed: {why}", tool)


def check_build_staleness(
    build_dir: Path,
    *,
    generator: str | None,
    log_dir: Path,
    targets: Sequence[str] = (),
    binaries: Mapping[str, Path] | None = None,
    program: str | None = None,
) -> Staleness:
    """Would building ``targets`` (or the binaries found) run anything? Never raises for tool trouble.

    ``program`` is the build tool to run (the build's ``CMAKE_MAKE_PROGRAM``); None: ninja or make on PATH."""
    binaries = binaries or {}
    auto = not targets
    is_cmake = generator is not None
    gen = generator or ""
    if gen.startswith("Ninja") or (not is_cmake and (build_dir / "build.ninja").is_file()):
        wanted = list(targets) or sorted(_rel_target(build_dir, p) for p in binaries.values())
        if not (build_dir / "build.ninja").is_file():
            return not_checked(f"no build.ninja in {build_dir}: build currency unknown", "ninja -n")
        return _ninja_staleness(build_dir, wanted, auto, log_dir, program)
    if is_cmake and gen.endswith("Makefiles") and not gen.startswith("NMake"):
        if not (build_dir / "Makefile").is_file():
            return not_checked(f"no Makefile in {build_dir}: build currency unknown", "make -n")
        wanted = list(targets) or sorted(binaries)
        return _cmake_make_staleness(build_dir, wanted, auto, log_dir, program)
    if not is_cmake and any((build_dir / n).is_file() for n in ("Makefile", "makefile", "GNUmakefile")):
        wanted = list(targets) or sorted(_rel_target(build_dir, p) for p in binaries.values())
        return _plain_make_staleness(build_dir, wanted, auto, log_dir, program)
    if is_cmake:
        return not_checked(f"generator {generator!r} has no dry run kvdiag knows: build currency unknown")
    return not_checked("no CMake cache, build.ninja or Makefile: build currency unknown")
