"""How a step's processes run: the sanitizer in front of each, within the step's budget.

A sweep must finish: one entry whose step hangs (a build that never ends, a
server that never answers) may not hold the others hostage. Every step gets a
budget: `BUDGET_FACTOR` times its `expected_seconds` on the reference machine,
at least `BUDGET_FLOOR_S` (a loaded machine, a cold cache), never more than its
`timeout`; a sweep's `--step-budget` replaces it. Past the budget the runner
kills the step's process group and the attempt is inconclusive with its partial
log.

What the processes print streams into the run's logs as it arrives (kvdiag.proc.runner), and
the observe stage (engine.evidence.observe) reads it back from disk.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Sequence

from kvdiag.errors import UsageError
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.registry.entry import Step

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


def sanitizer_invocation(step: Step):
    """The step's sanitizer settings as an invocation (None when the step runs bare)."""
    from kvdiag.proc.sanitizer import SanitizerInvocation

    if not step.sanitizer:
        return None
    return SanitizerInvocation(
        tool=step.sanitizer,
        options=tuple(step.sanitizer_options),
        kernel_filter=step.kernel_filter,
        print_limit=step.print_limit,
    )


def wrap_with_sanitizer(step: Step, program_argv: Sequence[str], log_file: Path,
                        sanitizer: Path | None) -> tuple[str, ...]:
    """argv with the sanitizer in front (or unchanged); `sanitizer` None shows the bare name."""
    invocation = sanitizer_invocation(step)
    if invocation is None:
        return tuple(program_argv)
    return invocation.argv(sanitizer or Path("compute-sanitizer"), log_file, program_argv)


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
