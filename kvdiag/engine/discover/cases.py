"""One case under one tool, as discovery judged it: clean, with findings, aborted, refused, or cut.

Discovery never drops a case. Every case it was asked to run ends in one ``CaseRecord``
whose ``state`` says what happened. A case that could not be judged is ``cut`` with the
reason (its budget ran out alone, its process could not start, Ctrl-C); one a tool was not run
on because the tool could not see it (racecheck on a case whose kernels hold no shared memory)
is ``spared``, with the launches that say so. The totals of a discovery are counted from these
records, so "judged" and "cut" always add up to the cases selected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kvdiag.engine.discover.findings import CaseFinding

CLEAN, FINDINGS, ABORTED, NOT_SUPPORTED, CUT = "clean", "findings", "aborted", "not-supported", "cut"
SPARED = "spared"       # not run under a tool that could not see it (engine.discover.routing says why)
STATES = (CLEAN, FINDINGS, ABORTED, NOT_SUPPORTED, SPARED, CUT)


@dataclass(frozen=True)
class CaseRecord:
    tool: str
    op: str
    params: str
    state: str                                   # one of STATES
    status: str | None = None                    # test-backend-ops' own status (OK, FAIL, ...)
    findings: tuple[CaseFinding, ...] = ()
    why: str | None = None                       # why it was cut, or what ended its process
    log: str | None = None                       # the process log holding its output
    lines: tuple[int, int] | None = None         # where in that log its share lies
    duration_s: float = 0.0                      # its share of its process's wall
    alone: bool = False                          # judged in a process of its own
    mode: str = "test"                           # the program's mode: "test" compares with the CPU, "launch" does not
    numeric: str | None = None                   # the numeric test's status, from a run of its own (engine.discover.numeric)
    launches: int | None = None                  # launch lines its process printed for it; None: not listed
    shared_memory: int | None = None             # the most shared memory one of them held, in bytes; None: unknown

    @property
    def judged(self) -> bool:
        return self.state != CUT

    @property
    def numeric_status(self) -> str | None:
        """test-backend-ops' own comparison with the CPU backend: the status of the numeric run of its
        own, else the sanitized run's when that run compared (test mode); None when nothing compared."""
        if self.numeric is not None:
            return self.numeric
        return self.status if self.mode == "test" else None

    @property
    def numeric_failed(self) -> bool:
        """test-backend-ops' own comparison with the CPU backend failed on this case."""
        return self.numeric_status == "FAIL"

    @property
    def key(self) -> tuple[str, str, str]:
        return self.tool, self.op, self.params

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "op": self.op, "params": self.params, "state": self.state,
                "status": self.status, "findings": [f.to_dict() for f in self.findings], "why": self.why,
                "log": self.log, "lines": list(self.lines) if self.lines else None,
                "duration_s": round(self.duration_s, 3), "alone": self.alone, "mode": self.mode,
                "numeric": self.numeric,
                **({"launches": self.launches, "shared_memory": self.shared_memory}
                   if self.launches is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaseRecord":
        lines = data.get("lines")
        return cls(tool=str(data["tool"]), op=str(data["op"]), params=str(data["params"]), state=str(data["state"]),
                   status=data.get("status"), findings=tuple(CaseFinding.from_dict(f) for f in data.get("findings") or ()),
                   why=data.get("why"), log=data.get("log"), lines=tuple(lines) if lines else None,
                   duration_s=float(data.get("duration_s") or 0.0), alone=bool(data.get("alone")),
                   mode=str(data.get("mode") or "test"), numeric=data.get("numeric"), launches=data.get("launches"),
                   shared_memory=data.get("shared_memory"))


@dataclass
class Totals:
    """Cases per state, per tool and over all: what the result's totals line says."""

    by_tool: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, record: CaseRecord) -> None:
        row = self.by_tool.setdefault(record.tool, dict.fromkeys(STATES, 0))
        row[record.state] += 1

    @property
    def all(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for row in self.by_tool.values():
            for state, n in row.items():
                out[state] += n
        return out

    def to_dict(self) -> dict[str, Any]:
        whole = self.all
        return {"by_tool": self.by_tool, "all": whole, "judged": sum(whole.values()) - whole[CUT], "cut": whole[CUT]}


def totals(records) -> Totals:
    out = Totals()
    for record in records:
        out.add(record)
    return out
