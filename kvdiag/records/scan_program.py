"""Which test-backend-ops ran a scan's cases, as a scan saves it (``"program"`` in the scan file).

`kvdiag scan` runs either the launch probe's rebuild of the program (GPU-only launch mode,
every kernel launch listed: engine.verdict.launch_program) or the build's own, saying why. The
record always has the same keys, whichever path was taken; a scan saved before it did
(kvdiag's first launch-probe scans, on the H200, had no ``why`` when the probe's program
ran) is read with the missing keys as None, so every reader, strict templates included,
sees one shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ProbeBuild", "ScanProgram"]


@dataclass(frozen=True)
class ProbeBuild:
    """The launch probe's program (kvdiag.probes.program_rebuild.ProbeProgram.to_dict)."""

    probe: str | None = None
    path: str | None = None            # under $KVDIAG_HOME/probe-programs/<key>/
    reused: bool = False               # kept from an earlier scan of the same build
    why_not: str | None = None         # why it could not be made
    seconds: float = 0.0               # what making it took

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "path": self.path, "reused": self.reused, "why_not": self.why_not,
                "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ProbeBuild:
        return cls(probe=raw.get("probe"), path=raw.get("path"), reused=bool(raw.get("reused")),
                   why_not=raw.get("why_not"), seconds=float(raw.get("seconds") or 0.0))


@dataclass(frozen=True)
class ScanProgram:
    """``path``: "launch" (the probe's program in launch mode), "test+launches" (its test mode, launches
    listed), "test+cupti" (the build's own in test mode, launches listed by kvdiag's CUPTI lister) or
    "plain" (the build's own, unlisted); ``why``: why the build's own ran; ``probe``: the probe's program
    when kvdiag made or tried to make it."""

    path: str
    why: str | None = None
    probe: ProbeBuild | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "why": self.why, "probe": self.probe.to_dict() if self.probe else None}

    @classmethod
    def from_dict(cls, raw: Any) -> ScanProgram | None:
        """The saved record, any keys missing read as None; None when there is none (a scan saved before
        kvdiag chose programs) or it is not a mapping."""
        if not isinstance(raw, Mapping):
            return None
        probe = raw.get("probe")
        return cls(path=str(raw.get("path") or "plain"), why=raw.get("why"),
                   probe=ProbeBuild.from_dict(probe) if isinstance(probe, Mapping) else None)
