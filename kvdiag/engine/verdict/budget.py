"""How long a step may run, and which steps compile code (what `--skip-builds` leaves out).

A sweep must finish: one entry whose step hangs (a build that never ends, a
server that never answers) may not hold the others hostage. Every step gets a
budget: `BUDGET_FACTOR` times its `expected_seconds` on the reference machine,
at least `BUDGET_FLOOR_S` (a loaded machine, a cold cache), never more than its
`timeout`; a sweep's `--step-budget` replaces it. Past the budget the runner
kills the step's process group and the attempt is inconclusive with its partial
log.
"""

from __future__ import annotations

import math
import os

from kvdiag.errors import UsageError
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
