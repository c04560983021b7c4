"""A compile step: does the build's source tree, configured with the entry's options, compile
the translation units the entry names?

The step does the least work that can show a compile-time defect: a scratch build
kept between runs (:mod:`kvdiag.workspace.kept_build`), configured once per
(source tree, commit, options), and only the objects of the step's ``sources``
built — not the library. Its verdicts:

* the signature matched in the compiler's output → confirmed, the error lines quoted
  and counted;
* the budget ran out (configure or compile) → inconclusive, the partial log kept;
* the source tree lacks a named source, its CMake does not use an option the entry
  applies to, or the configured project does not compile the source → not-applicable,
  saying which;
* the configure failed, or the compile failed with other errors → inconclusive,
  quoting the first error;
* every object built clean → not-reproduced, but only once the compile control
  (:mod:`kvdiag.controls.compile_control`) showed on this machine that the same flow
  prints a staged template mismatch; an object ninja found current was compiled
  clean from these inputs by an earlier run, and the reason says so.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.verdict.processes import not_run
from kvdiag.engine.evidence.observe import observe
from kvdiag.errors import AttemptInterrupted
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.parse.compiler import compiler_errors
from kvdiag.proc.runner import CommandInterrupted
from kvdiag.registry.entry import Entry, Step
from kvdiag.workspace.kept_build import SCRATCH_DIR, KeptBuild, KeptBuildKey, compiler_launcher, option_definition

GateFactory = Callable[[Path, dict, str | None, float], Gate]


def step_limit(step: Step, budget_s: float | None) -> float:
    """Seconds the whole step (configure and build) may take: the step's timeout, or less."""
    return float(min(step.timeout, budget_s)) if budget_s else float(step.timeout)


def scratch_key(step: Step, build) -> KeptBuildKey:
    commit = build.git.commit if build.git is not None else None
    return KeptBuildKey.make(build.source_dir, commit, step.cmake_defines, compiler_launcher())


def attempt_compile(entry: Entry, step: Step, build, home: Path, log_dir: Path, index: int, *,
                    budget_s: float | None = None, on_output=None, say=None, cancel=None,
                    control: GateFactory | None = None) -> Attempt:
    """Run one attempt of a compile step against ``build`` (a BuildInfo) and judge it.

    ``control(log_dir, defines, launcher, deadline)`` gives the gate for a not-reproduced (default:
    the compile control). Raises AttemptInterrupted on Ctrl-C, with the attempt judged from the partial logs."""
    started = time.monotonic()
    limit = step_limit(step, budget_s)
    if build is None or build.source_dir is None or not Path(build.source_dir).is_dir():
        return not_run(step, index, Verdict.SKIPPED, "the build's source tree is unknown or absent here (no "
                        "CMAKE_HOME_DIRECTORY in its CMakeCache.txt): a compile step configures that tree")
    source = Path(build.source_dir)
    absent = [s for s in step.sources if not (source / s).is_file()]
    if absent:
        return not_run(step, index, Verdict.NOT_APPLICABLE, f"the source tree {source} has no {', '.join(absent)}")
    required = step.required_options(entry.applies.cmake_options)
    for option in required:
        if option_definition(source, option) is None:
            return not_run(step, index, Verdict.NOT_APPLICABLE,
                            f"no CMakeLists.txt or *.cmake file of {source} defines {option}")
    key = scratch_key(step, build)
    scratch = KeptBuild(home / SCRATCH_DIR, key)
    name = f"{step.name}-{index}"
    try:
        run = scratch.compile_sources(step.sources, log_dir=log_dir, name=name, deadline=started + limit,
                                      required_options=required,
                                      on_output=on_output, say=say, cancel=cancel)
    except CommandInterrupted as exc:
        obs = observe(step, [exc.result], [])
        raise AttemptInterrupted(judge_attempt(entry, obs, Gate(False, "interrupted"), index,
                                               time.monotonic() - started, str(log_dir))) from None
    duration = time.monotonic() - started
    commands = tuple(r.to_dict() for r in run.results)
    if run.stopped and not run.timed_out:
        return Attempt(step=step.name, index=index, verdict=Verdict(run.verdict), reason=run.stopped,
                       evidence=Evidence(exit=run.results[-1].describe() if run.results else None),
                       commands=commands, duration_s=duration, log_dir=str(log_dir))
    obs = observe(step, run.results, [], budget_s=limit)
    gate = control or _default_control(home)
    attempt = judge_attempt(entry, obs, lambda: gate(log_dir / "control", dict(step.cmake_defines), key.launcher,
                                                     started + limit), index, duration, str(log_dir))
    return _explained(attempt, run, obs.combined)


def _default_control(home: Path) -> GateFactory:
    def gate(log_dir: Path, defines: dict, launcher: str | None, deadline: float) -> Gate:
        from kvdiag.controls.compile_control import compile_control_gate

        return compile_control_gate(home, log_dir, defines, launcher, deadline)
    return gate


def _explained(attempt: Attempt, run, text: str) -> Attempt:
    """The verdict in the words of a compile: how many compiler errors, which objects, reused or not."""
    errors = compiler_errors(text)
    where = "configure reused" if run.reused else "configured now"
    objects = ", ".join(Path(o).name for o in run.objects) or "no object"
    reason = attempt.reason
    if attempt.verdict is Verdict.CONFIRMED:
        reason = f"{reason} (of {len(errors)} compiler error(s)) compiling {objects}; {where}"
    elif attempt.verdict is Verdict.NOT_REPRODUCED:
        current = "ninja: no work to do" in text
        how = ("the object(s) were current: compiled clean from these inputs by an earlier run in "
               f"{run.build_dir}" if current else f"compiled {objects} clean")
        reason = f"{how} ({where}); the signature did not match; {reason.rsplit('; ', 1)[-1]}"
    elif attempt.verdict is Verdict.INCONCLUSIVE and errors and not run.timed_out:
        reason = f"{reason}; first compiler error: {errors[0].raw}"
    return replace(attempt, reason=reason)
