"""The answer a detector control gives the engine: may a step end ``not-reproduced``, and why.

One type for every control (a sanitizer's canary pair, the staleness dry run):
the engine's judge consults it, the controls produce it, and it depends on
nothing, so neither side has to import the other to speak it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Gate:
    """Whether a not-reproduced may be issued for a detector, and why (from the controls)."""

    allowed: bool
    reason: str


#: the gate for each sanitizer tool (None: a step without one), as a run's engine asks for it
GateProvider = Callable[[str | None], Gate]


def no_sanitizer_gate(tool: str | None) -> Gate:
    """Without a sanitizer the detector is the program's own output and exit, judged by kvdiag's
    parsers; its control is that matching work executed, which the judge checks separately."""
    return Gate(True, "no sanitizer involved: the control is that the matching work executed")
