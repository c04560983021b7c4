"""The answer a detector control gives the engine: may a step end ``not-reproduced``, and why.

One type for every control (a sanitizer's canary pair, the staleness dry run):
the engine's judge consults it, the controls produce it, and it depends on
nothing, so neither side has to import the other to speak it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gate:
    """Whether a not-reproduced may be issued for a detector, and why (from the controls)."""

    allowed: bool
    reason: str
