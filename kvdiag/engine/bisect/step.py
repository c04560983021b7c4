"""One step of a bisection: build the commit checked out in the scratch worktree, run the entry, judge.

The same function judges the two ends before ``git bisect start`` (called in
process) and every commit ``git bisect run`` picks (called as ``python -m
kvdiag.commands.bisect bisect-step …``). It never raises for a commit's own
failure: a build that fails, a verdict that is neither of the direction's two
and an error of kvdiag's are all a skip (125), recorded with their reason.

The build tree is one folder for the whole bisection, so each step's build
recompiles only what the checkout changed. The configure runs again at every
step, on that same folder (seconds; no object is rebuilt by it): llama.cpp and
ggml list their CUDA sources with ``file(GLOB)`` without ``CONFIGURE_DEPENDS``, so
a commit that adds or removes a ``.cu`` file without touching a CMakeLists.txt
would otherwise be built from the previous commit's source list. A step whose entry runs a compile
step (D7) builds nothing here: that step configures its own kept scratch build
of the source tree (:mod:`kvdiag.engine.verdict.compile_check`). A commit an earlier
bisection judged, in the steps ``--resume`` took from it
(:mod:`kvdiag.engine.bisect.resume`), is not built: its step is taken as recorded.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from kvdiag.engine.bisect.resume import Resumed
from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.plan import pick_step
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.errors import RunInterrupted
from kvdiag.workspace.scratch_build import BuildFailed, BuildRecipe, build_tree
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.fileio import load_json_file
from kvdiag.parse.compiler import compiler_errors
from kvdiag.probes.worktree import Git
from kvdiag.proc.runner import CommandInterrupted
from kvdiag.progress import Progress
from kvdiag.records.bisect import ROLE_STEP, SKIP, Direction, StepRecord, steps_from
from kvdiag.records.run import RunRecord, target_record
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore, write_json_atomic

__all__ = ["append_step", "bisect_step", "builds_nothing", "read_steps"]


def builds_nothing(entry: Entry, step: str | None) -> bool:
    """The entry's step compiles its own objects (a compile step): a bisection needs a source tree, no build."""
    return pick_step(entry, step).kind == "compile"


def read_steps(path: Path) -> list[StepRecord]:
    try:
        data = load_json_file(path)
    except (OSError, ValueError):
        return []
    return steps_from(data) if isinstance(data, list) else []


def append_step(path: Path, record: StepRecord) -> None:
    steps = read_steps(path)
    steps.append(record)
    write_json_atomic(Path(path), [s.to_dict() for s in steps])


def bisect_step(entry: Entry, *, source: Path, build_dir: Path, recipe: BuildRecipe | None, home: Path,
                record: Path | None = None, step: str | None = None, sanitizer: Path | None = None,
                progress: Progress | None = None, direction: Direction = Direction.CAUSE,
                role: str = ROLE_STEP, resumed: Resumed | None = None) -> StepRecord:
    """Build (unless ``recipe`` is None) the commit checked out in ``source``, run the entry, and record it;
    or, when ``resumed`` holds that commit, take the earlier bisection's step instead.

    Ctrl-C is re-raised as KeyboardInterrupt (git bisect run then stops): it is not a verdict about the commit.
    """
    progress = progress or Progress()
    started = time.monotonic()
    store = RunStore(home)
    commit = "unknown"
    step_dir = None
    times: dict[str, float] = {}
    try:
        step_dir = store.create(f"{entry.id}-bisect-step",
                                RunRecord(entry=f"{entry.id}-bisect-step", status="running", kind="bisect-step"))
        commit = Git(source, step_dir.logs, "git-step").out("rev-parse", "HEAD", name="head")
        taken = resumed.take(commit, role) if resumed is not None else None
        if taken is not None:
            outcome = taken
        else:
            fields = _build_and_run(entry, source, build_dir, recipe, home, store, step_dir.logs, step, sanitizer,
                                    progress, direction, times)
            outcome = StepRecord(commit=commit, role=role, duration_s=time.monotonic() - started,
                                 configure_s=times.get("configure"), build_s=times.get("build"),
                                 run_s=times.get("run"), **fields)
    except (KeyboardInterrupt, CommandInterrupted):
        raise KeyboardInterrupt from None
    except Exception as exc:  # noqa: BLE001 - any failure of kvdiag is a skip for git, recorded with its reason
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        outcome = StepRecord(commit, "error", detail, SKIP, None, time.monotonic() - started, role=role,
                             configure_s=times.get("configure"), build_s=times.get("build"))
    try:
        if record is not None:
            append_step(record, outcome)
        if step_dir is not None:
            step_dir.write_record(RunRecord(entry=f"{entry.id}-bisect-step", status="finished", kind="bisect-step",
                                            fields={"step": outcome.to_dict(), "direction": direction.value}))
    except OSError:
        pass
    return outcome


def compile_phases(attempts, run_s: float) -> dict[str, float]:
    """A compile step's own configure and object build, out of its run's commands (cmake; ninja building,
    not ``ninja -t``): the step's table then says where a compile step's time went, like a build's. The
    run keeps the rest (ninja's query, the compile control, judging)."""
    configure = build = 0.0
    for attempt in attempts:
        for command in attempt.commands:
            argv = [str(a) for a in command.get("argv") or ()]
            seconds = float(command.get("duration_s") or 0.0)
            if argv and Path(argv[0]).name == "cmake":
                configure += seconds
            elif argv and Path(argv[0]).name == "ninja" and "-t" not in argv:
                build += seconds
    if not configure and not build:
        return {}
    return {"configure": configure, "build": build, "run": max(run_s - configure - build, 0.0)}


def build_failure_reason(exc: BuildFailed) -> str:
    """What a failed build step says: the command, then the compiler's first error when the log has one (the
    cause a maintainer looks for: on the device the fork's f7832345b ended ``ninja: build stopped: subcommand
    failed.`` 40 lines after ``fattn-common.cuh:6:10: fatal error: turbo4-tcq-codebook.cuh: No such file or
    directory``), else the log's last line."""
    errors = compiler_errors(exc.result.combined_text()) if exc.result is not None else []
    if errors:
        first = errors[0]
        return f"{exc}: first error: {Path(first.file).name}:{first.line}: {first.severity}: {first.message}"
    last = exc.tail[-1] if exc.tail else ""
    return f"{exc}" + (f": {last}" if last else "")


def _build_and_run(entry: Entry, source: Path, build_dir: Path, recipe: BuildRecipe | None, home: Path,
                   store: RunStore, logs: Path, step: str | None, sanitizer: Path | None, progress: Progress,
                   direction: Direction, times: dict[str, float]) -> dict:
    """The step's verdict fields (``verdict``, ``reason``, ``exit``, ``run_dir``, ``build_log``); ``times`` gets
    the seconds of each phase that ran: configure, build, run."""
    if recipe is not None:
        try:
            build_tree(recipe, Path(source), Path(build_dir), log_dir=logs, label="bisect", progress=progress,
                       times=times)
        except BuildFailed as exc:
            return {"verdict": "build-failed", "reason": build_failure_reason(exc), "exit": SKIP,
                    "build_log": str(exc.log) if exc.log else None}
    setup = store.create("target")
    if recipe is not None:
        target = prepare_target(Path(build_dir), log_dir=setup.logs, sanitizer=sanitizer, check_staleness=False)
    else:
        target = prepare_target(None, source_dir=Path(source), log_dir=setup.logs, sanitizer=sanitizer)
    setup.write_record(target_record(target.to_dict()))
    run_dir = store.create(entry.id)
    run_started = time.monotonic()
    try:
        outcome = run_entry(entry, target, run_dir, options=RunOptions(step=step, progress=progress),
                            gate_provider=controls_gate_provider(home, target, setup.logs))
    except RunInterrupted:
        raise KeyboardInterrupt from None
    times["run"] = time.monotonic() - run_started
    if recipe is None:
        times.update(compile_phases(outcome.attempts, times["run"]))
    return {"verdict": outcome.verdict.value, "reason": outcome.reason,
            "exit": direction.git_answer(outcome.verdict.value), "run_dir": str(run_dir.path)}
