"""A discovery as data: every case's record, the roots grouped from them, and the totals.

The saved document holds the case records themselves, with what the tree said about the
printed paths (``relative``) and the sites' source lines, so that ``kvdiag merge`` can rebuild
the roots of several shards, and the tests can re-judge recorded logs, without the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvdiag.engine.discover.cases import CaseRecord, totals
from kvdiag.engine.discover.matching import match_roots
from kvdiag.engine.discover.reframe import apply_frames
from kvdiag.engine.discover.roots import Root, group_roots
from kvdiag.proc.mps import MpsPipe
from kvdiag.store.discoveries import saved_count

KIND = "discover"
FORMAT_VERSION = 1


@dataclass
class DiscoverResult:
    tools: tuple[str, ...]
    gates: dict[str, dict[str, Any]]                 # tool -> {trusted, reason}
    space: dict[str, Any]
    records: list[CaseRecord] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    relative: dict[str, str] = field(default_factory=dict)        # printed path -> path in the tree
    source_lines: dict[str, str] = field(default_factory=dict)    # tree path:line -> the line's text
    roots: list[Root] = field(default_factory=list)
    wall_s: float = 0.0
    workers: int = 0
    case_budget_s: float = 0.0
    interrupted: bool = False
    started_at: str = ""
    target: dict[str, Any] | None = None
    run_dir: Path | None = None
    shard: str | None = None
    kvdiag_version: str = ""
    registry: str | None = None                       # the registry the roots were matched against
    count_warnings: bool = False                      # --warnings: racecheck warning roots count as defects
    program: dict[str, Any] | None = None             # which test-backend-ops ran, in which mode (discover.program)
    numeric_runs: list[dict[str, Any]] = field(default_factory=list)  # the numeric test's processes (discover.numeric)
    routing: dict[str, Any] = field(default_factory=dict)   # tools routed by shared memory (discover.routing)
    backtrace: str = "auto"                            # --backtrace: per tool (auto), device or no (discover.batch)
    frames: list[dict[str, Any]] = field(default_factory=list)  # frameless roots' smallest cases rerun (discover.reframe)
    racecheck_workers: int | None = None               # --racecheck-workers (None: the tool's own choice)
    occupancy: dict[str, Any] | None = None            # processes at once over the run (discover.occupancy)
    mps: dict[str, Any] | None = None                  # the MPS daemon the processes were clients of (proc.mps)
    order: str = ""                                    # whose measured costs ordered the queue (discover.costs)

    @property
    def defects(self) -> list[Root]:
        return [r for r in self.roots if r.is_defect or self.count_warnings]

    @property
    def warnings(self) -> list[Root]:
        return [r for r in self.roots if not (r.is_defect or self.count_warnings)]

    @property
    def new_roots(self) -> list[Root]:
        return [r for r in self.defects if r.known is None]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, "format_version": FORMAT_VERSION, "kvdiag_version": self.kvdiag_version,
                "target": self.target, "tools": list(self.tools), "gates": self.gates, "space": self.space,
                "totals": totals(self.records).to_dict(), "wall_s": round(self.wall_s, 3), "workers": self.workers,
                "case_budget_s": self.case_budget_s, "interrupted": self.interrupted, "started_at": self.started_at,
                "shard": self.shard, "registry": self.registry,
                "run_dir": str(self.run_dir) if self.run_dir else None,
                "roots": [r.to_dict() for r in self.defects], "warnings": [r.to_dict() for r in self.warnings],
                "processes": list(self.processes), "program": self.program, "numeric_runs": list(self.numeric_runs),
                "routing": dict(self.routing), "backtrace": self.backtrace, "frames": list(self.frames),
                "racecheck_workers": self.racecheck_workers, "occupancy": self.occupancy,
                "mps": self.mps, "order": self.order, "relative": dict(self.relative),
                "source_lines": dict(self.source_lines), "cases": [r.to_dict() for r in self.records]}


def build_roots(records: Iterable[CaseRecord], relative: Mapping[str, str], source_lines: Mapping[str, str],
                entries: Sequence[Any] = (), frames: Sequence[Mapping[str, Any]] = ()) -> list[Root]:
    """The roots of ``records`` with their tree paths and lines, matched against ``entries``, with the
    launching kernels that ``frames`` found for them."""
    roots = group_roots(records, relative)
    for root in roots:
        path, sep, line = root.key.site.rpartition(":")
        if sep and line.isdigit():
            root.line = int(line)
            root.path = path if (path in relative.values() or "/" in path) else None
        root.source_line = source_lines.get(root.key.site)
    match_roots(roots, entries)
    apply_frames(roots, frames)
    return roots


def from_document(doc: Mapping[str, Any], entries: Sequence[Any] = ()) -> DiscoverResult:
    """A saved discovery read back (its roots rebuilt from its cases, matched against ``entries``)."""
    records = [CaseRecord.from_dict(c) for c in doc.get("cases") or ()]
    relative = dict(doc.get("relative") or {})
    source_lines = dict(doc.get("source_lines") or {})
    result = DiscoverResult(tools=tuple(doc.get("tools") or ()), gates=dict(doc.get("gates") or {}),
                            space=dict(doc.get("space") or {}), records=records,
                            processes=list(doc.get("processes") or ()), relative=relative,
                            source_lines=source_lines, wall_s=float(doc.get("wall_s") or 0.0),
                            workers=int(doc.get("workers") or 0), case_budget_s=float(doc.get("case_budget_s") or 0),
                            interrupted=bool(doc.get("interrupted")), started_at=str(doc.get("started_at") or ""),
                            target=doc.get("target"), shard=doc.get("shard"),
                            kvdiag_version=str(doc.get("kvdiag_version") or ""), registry=doc.get("registry"),
                            program=doc.get("program"), numeric_runs=list(doc.get("numeric_runs") or ()),
                            routing=dict(doc.get("routing") or {}), backtrace=str(doc.get("backtrace") or "device"),
                            frames=[dict(row) for row in doc.get("frames") or () if isinstance(row, Mapping)],
                            racecheck_workers=saved_count(doc.get("racecheck_workers")),
                            occupancy=doc.get("occupancy") if isinstance(doc.get("occupancy"), Mapping) else None,
                            mps=saved_mps(doc.get("mps")), order=doc["order"] if isinstance(doc.get("order"), str) else "")
    result.roots = build_roots(records, relative, source_lines, entries, result.frames)
    return result


def saved_mps(doc: Any) -> dict[str, Any] | None:
    """A saved MPS record as it is when it reads as one, else None (an older document has none)."""
    pipe = MpsPipe.from_dict(doc)
    return pipe.to_dict() if pipe is not None else None
