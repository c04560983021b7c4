"""The attempt stage: a step's processes run, the sanitizer in front of each, within the step's budget.

A sweep must finish: one entry whose step hangs (a build that never ends, a
server that never answers) may not hold the others hostage. Every step gets a
budget: `BUDGET_FACTOR` times its `expected_seconds` on the reference machine,
at least `BUDGET_FLOOR_S` (a loaded machine, a cold cache), never more than its
`timeout`; a sweep's `--step-budget` replaces it. Past the budget the runner
kills the step's process group and the attempt is inconclusive with its partial
log.

What the processes print streams into the run's logs as it arrives (kvdiag.proc.runner): this
stage returns what they left (`Ran`), and the observe stage (engine.evidence.observe) reads it
back from disk. Ctrl-C and a program that cannot start are part of what is returned, not raised:
the pipeline (engine.verdict.attempt) still judges what a cut-short attempt left.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Mapping, Sequence

from kvdiag.errors import CommandInterrupted, CommandNotFound, UsageError
from kvdiag.progress import Progress
from kvdiag.proc.runner import run_command
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.registry.entry import Step
from kvdiag.server import run_server_attempt

BUDGET_FACTOR = 5
BUDGET_FLOOR_S = 120.0

#: programs whose run is a compile (their basename, as argv[0] of a step's command)
BUILD_PROGRAMS = frozenset({"cmake", "ninja", "make", "gmake", "nvcc", "ccache", "sccache", "cc", "c++", "gcc",
                            "g++", "clang", "clang++"})
#: step kinds that compile code (kvdiag's D13 `build-check` is a dry run and compiles nothing)
BUILD_KINDS = frozenset({"build", "compile"})


def step_budget(step: Step, override: float | None = None) -> float:
    """The step's time budget in seconds (see the module's docstring)."""
    if override is not None:
        seconds = float(override)
        if not (math.isfinite(seconds) and seconds > 0):       # NaN or inf would turn every deadline off
            raise UsageError(f"a step budget must be a finite number of seconds above 0, not {override!r}")
        return seconds
    if step.expected_seconds:
        return float(min(step.timeout, max(BUDGET_FLOOR_S, BUDGET_FACTOR * float(step.expected_seconds))))
    return float(step.timeout)


def compiles(step: Step) -> bool:
    """True for a step that builds code (configures or compiles a tree), false for one that runs a binary."""
    if step.kind in BUILD_KINDS:
        return True
    return any(command and os.path.basename(command[0].strip()) in BUILD_PROGRAMS
               for command in step.command_templates)


def sanitizer_invocation(step: Step, env: Mapping[str, str] | None = None,
                         environ: Mapping[str, str] | None = None):
    """The step's sanitizer settings as an invocation (None when the step runs bare), for processes that
    see ``environ`` (default: this process's) with ``env``, the plan's variables, on top."""
    from kvdiag.proc.sanitizer import SanitizerInvocation

    if not step.sanitizer:
        return None
    return SanitizerInvocation(
        tool=step.sanitizer,
        options=tuple(step.sanitizer_options),
        kernel_filter=step.kernel_filter,
        print_limit=step.print_limit,
        destroy_on_device_error=kernel_under_mps(step, {**(os.environ if environ is None else environ),
                                                        **(env or {})}),
    )


def kernel_under_mps(step: Step, environ: Mapping[str, str]) -> str | None:
    """``kernel`` where an MPS daemon would serve the step's processes and its tool's findings can end a
    kernel, unless the entry names ``--destroy-on-device-error`` itself; else None (the tool's default).

    That default, ``context``, is a fatal GPU error to an MPS server, and by MPS's documentation it reaches
    every client on the GPU at that moment: another user's job, or kvdiag's own processes beside it (an
    H100, device session 27: the server logged "handling a fatal GPU error" for the synccheck control and
    reset its context). Without a daemon nothing changes, so a verdict there rests on the same process as
    before. The daemon asked is the one the processes would connect to (kvdiag.proc.mps); the argv in
    cmd.json shows the choice."""
    from kvdiag.proc.mps import mps_pipe
    from kvdiag.proc.sanitizer import DESTROY_OPTION, DEVICE_ERROR_TOOLS

    if step.sanitizer not in DEVICE_ERROR_TOOLS or any(
            option.split("=", 1)[0] == DESTROY_OPTION for option in step.sanitizer_options):
        return None
    return "kernel" if mps_pipe(environ) is not None else None


def wrap_with_sanitizer(step: Step, program_argv: Sequence[str], log_file: Path, sanitizer: Path | None,
                        env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """argv with the sanitizer in front (or unchanged); `sanitizer` None shows the bare name."""
    invocation = sanitizer_invocation(step, env)
    if invocation is None:
        return tuple(program_argv)
    return invocation.argv(sanitizer or Path("compute-sanitizer"), log_file, program_argv)


@dataclass
class Ran:
    """What an attempt's processes left: each command's result and the sanitizer's logs."""

    results: list[Any] = field(default_factory=list)
    sanitizer_logs: list[Path] = field(default_factory=list)
    interrupted: bool = False            # Ctrl-C: the last result is partial
    not_started: str | None = None       # the program could not be started: nothing ran
    waited_s: float = 0.0                # for its lease (a scan's turn, a GPU slot) before the first command


def run_commands(planned, sanitizer: Path | None, log_dir: Path, name: str, budget: float, *,
                 started: float, lease: ContextManager, progress: Progress, label: str, cancel=None) -> Ran:
    """Run the planned step's commands in order, each under the step's sanitizer, until one fails; the
    budget (counted from ``started``, the attempt's start) covers them all (a configure and its build)."""
    step, ran = planned.step, Ran()
    invocation = sanitizer_invocation(step, planned.env)
    progress.start(label, budget_s=budget)
    asked = time.monotonic()
    try:
        with lease:
            ran.waited_s = time.monotonic() - asked
            started += ran.waited_s         # the budget counts from when its processes could start
            for j, command in enumerate(planned.commands):
                own = name + (f"-{j + 1}" if len(planned.commands) > 1 else "")
                argv = tuple(command)
                if invocation is not None:
                    log = log_dir / f"{own}.sanitizer.log"
                    ran.sanitizer_logs.append(log)
                    argv = invocation.argv(sanitizer, log, command)
                left = budget if j == 0 else max(1.0, budget - (time.monotonic() - started))
                try:
                    result = run_command(argv, timeout=left, log_dir=log_dir, name=own,
                                         env_overrides=line_env(step, planned.env), tty=step.tty,
                                         on_output=progress.line, cancel=cancel)
                except CommandInterrupted as exc:
                    ran.results.append(exc.result)
                    ran.interrupted = True
                    return ran
                except CommandNotFound as exc:
                    ran.not_started = str(exc)
                    return ran
                ran.results.append(result)
                if not result.ok and j + 1 < len(planned.commands):
                    break
    finally:
        progress.stop()
    return ran


def run_server(planned, sanitizer: Path | None, log_dir: Path, name: str, budget: float, requests, *,
               lease: ContextManager, progress: Progress, label: str, cancel=None) -> Ran:
    """A server step: start llama-server (under the sanitizer if the step has one), send the
    step's requests, stop it; its logs are judged like any command's."""
    step, ran = planned.step, Ran()
    argv = tuple(planned.commands[0])
    invocation = sanitizer_invocation(step, planned.env)
    if invocation is not None:
        log = log_dir / f"{name}.sanitizer.log"
        ran.sanitizer_logs.append(log)
        argv = invocation.argv(sanitizer, log, argv)
    progress.start(label, budget_s=budget)
    asked = time.monotonic()
    try:
        with lease:
            ran.waited_s = time.monotonic() - asked
            result, _server = run_server_attempt(
                step, argv, planned.env or None, log_dir, name, timeout=budget, requests=requests,
                on_output=progress.line, cancel=cancel, wrapped=invocation is not None)
        ran.results.append(result)
    except CommandInterrupted as exc:
        ran.results.append(exc.result)
        ran.interrupted = True
    except CommandNotFound as exc:
        ran.not_started = str(exc)
    finally:
        progress.stop()
    return ran


def line_env(step: Step, env: Mapping[str, str]) -> dict[str, str] | None:
    """A build step's environment: TERM=dumb unless the step sets TERM, so that ninja on the
    step's pty prints one `[n/m]` line per edge (which the log keeps and progress shows)
    instead of rewriting one line with carriage returns."""
    if compiles(step):
        return {"TERM": "dumb", **env}
    return dict(env) or None


def not_run(step: Step, index: int, verdict: Verdict, reason: str) -> Attempt:
    """An attempt that ran nothing (a template that does not render, a program that is not there)."""
    return Attempt(step=step.name, index=index, verdict=verdict, reason=reason, evidence=Evidence())
