"""Why verdicts were held back: the inconclusives a detector control caused, and the command that fixes it.

A sanitizer step may end not-reproduced only when its tool's canary control
passed on this machine (`kvdiag.controls.cache.gate_for_record`); otherwise the
verdict is inconclusive and its reason names the control. Text outputs group
those reasons so a user reads "72 held back by synccheck's control" with the
one command that lifts it, instead of a bare count.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

_CONTROL = re.compile(r"\b(memcheck|racecheck|synccheck|initcheck)'s (?:positive |negative )?control\b")


@dataclass(frozen=True)
class HeldBack:
    tool: str
    count: int
    why: str       # the control's state, one line
    fix: str       # the one command that lifts it

    def line(self) -> str:
        return f"held back: {self.count} by {self.tool}'s control ({self.why}); fix: {self.fix}"


def one_line(reason: str) -> str:
    """A reason on one line (a log excerpt inside it must not break a terminal's layout)."""
    return " ".join(str(reason).split())


def _state_and_fix(reason: str) -> tuple[str, str]:
    if "neither pycuda nor cupy" in reason:
        return ("no canary launcher: pycuda, cupy and nvcc all missing",
                "put the CUDA toolkit's nvcc on PATH (or pip install -e '.[gpu]'), then kvdiag doctor")
    if "has not run" in reason or "could not run" in reason:
        return "not run on this machine", "kvdiag doctor"
    if "not detected" in reason:
        return "its positive canary was not detected here", "kvdiag doctor --refresh"
    if "not clean" in reason:
        return "its negative canary was not clean here", "kvdiag doctor --refresh"
    return "did not pass on this machine", "kvdiag doctor --refresh"


def held_back(reasons: Iterable[str]) -> list[HeldBack]:
    """The inconclusive reasons that name a detector control, grouped by tool and state."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for reason in reasons:
        match = _CONTROL.search(str(reason))
        if match:
            counts[(match.group(1), *_state_and_fix(str(reason)))] += 1
    return [HeldBack(tool, n, why, fix) for (tool, why, fix), n in counts.most_common()]


def held_back_lines(reasons: Iterable[str]) -> list[str]:
    return [h.line() for h in held_back(reasons)]


def reason_counts(reasons: Iterable[str], width: int = 160) -> list[tuple[int, str]]:
    """(count, reason) of the distinct reasons, most frequent first, each on one line."""
    counts = Counter(one_line(r)[:width] for r in reasons)
    return [(n, r) for r, n in counts.most_common()]
