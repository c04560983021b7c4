"""Which test-backend-ops a discovery's sanitized processes run, and in which mode.

A sanitized case in test mode also computes the op on the CPU backend and compares: for the
suite's largest cases (TOP_K over half a million elements, the big MUL_MATs, IM2COL_3D) that
reference is work the sanitizer does not need, repeated once per tool. Where kvdiag can make
the launch probe's build of the user's test-backend-ops (engine.verdict.launch_program), the
sanitized processes run its ``launch`` mode instead: the same cases, support decided the same
way, the same kernels with the same shapes on the GPU, no CPU reference and no comparison.
The numeric test is not lost: the cases a sanitizer found something in run once more in test
mode, unsanitized, on the user's own program (engine.discover.numeric), so that a root still
says whether its cases also compute wrong numbers. ``--program plain``, a build the probe
cannot be made for, or ``KVDIAG_PROBE_PROGRAM=0`` keep test mode on the user's program, and
the result says which ran and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.engine.verdict.launch_program import disabled_reason

TEST, LAUNCH = "test", "launch"


@dataclass(frozen=True)
class DiscoverProgram:
    path: Path
    mode: str                       # TEST or LAUNCH
    why: str                        # why this program and mode
    probe: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "mode": self.mode, "why": self.why, "probe": self.probe}

    def describe(self) -> str:
        if self.mode == LAUNCH:
            return (f"sanitized cases run in the launch probe's GPU-only mode ({self.why}); the cases with findings "
                    f"run again unsanitized in test mode for the numeric test")
        return f"sanitized cases run the build's own test-backend-ops in test mode ({self.why})"


def choose_program(target: Any, binary: Path, asked: str = "auto") -> DiscoverProgram:
    """The launch probe's program in launch mode when asked (``auto``) and it can be made; else the user's."""
    if asked == "plain":
        return DiscoverProgram(binary, TEST, "--program plain")
    disabled = disabled_reason()
    if disabled:
        return DiscoverProgram(binary, TEST, disabled)
    if getattr(target, "probe_program", None) is None:
        return DiscoverProgram(binary, TEST, "no kvdiag home to keep the launch probe's program in")
    made = target.probe_program()
    probe = made.to_dict() if hasattr(made, "to_dict") else None
    if not made.available:
        return DiscoverProgram(binary, TEST, f"the launch probe's program could not be made: {made.why_not}", probe)
    return DiscoverProgram(Path(made.path), LAUNCH, made.describe(), probe)
