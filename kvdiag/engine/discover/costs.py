"""How long a discovery's unit will take, so that the heaviest start first.

The pool ends when its last process does, so a process of several minutes that starts late sets
the wall. Neither a unit's case count nor its elements tell which units are heavy across ops. In
device session 27 (one H100, the whole suite under racecheck and synccheck, 16 processes with MPS)
the queue put the units with most cases first. TOP_K's 30-case batches (their case strings are long,
so fewer fit one -p pattern) came after every 32-case batch of the suite: its synccheck processes,
which list the launches racecheck is routed by, started 660 s into a 997 s run, and its racecheck
processes, 186 to 331 s each, started at 662 to 675 s. ARGSORT's (256 s) started at 735 s.

The estimate is measured, not modelled: the seconds a process of (tool, op) took per case the op
listed. First in this machine's own latest discoveries (``discover_costs``: the newest few saved
in the kvdiag home whose processes ran the same program mode), then in recorded whole-suite
discoveries on an H100 (``kvdiag/data/discover-costs.json``, which names them;
``rates_from_discovery`` derives it and a test re-derives it from the recorded runs).
A unit costs its op's rate times its cases; an op the table lacks costs its tool's median rate.
Where racecheck is routed, the processes that list the launches carry racecheck's estimate for
their cases too, since that work cannot start before them. Among units of one estimate (one op's
dealt batches) the one with the most elements goes first. The rates come from one GPU and one tree:
they order the queue and decide nothing else.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvdiag.engine.discover.findings import case_elements
from kvdiag.fileio import load_json_file
from kvdiag.resources import PACKAGE_DIR
from kvdiag.store.discoveries import DISCOVER_FILE, is_discovery
from kvdiag.store.runs import RunStore

SHIPPED_COSTS = PACKAGE_DIR / "data" / "discover-costs.json"
LOCAL_DISCOVERIES = 3          # this machine's newest discoveries that a plan learns from
_INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class CaseCosts:
    """Seconds a process took per listed case, by tool and op; ``source`` says where they were measured."""

    rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    source: str = ""

    def rate(self, tool: str, op: str) -> float:
        """(tool, op)'s rate, else the tool's median, else 1.0 (every unit then weighs its case count)."""
        known = self.rates.get(tool) or {}
        if op in known:
            return known[op]
        return statistics.median(known.values()) if known else 1.0

    def unit_seconds(self, tool: str, op: str, cases: int, *, gated: Sequence[str] = ()) -> float:
        """A unit's estimate; ``gated``: the routed tools whose work waits on this unit's listing."""
        return cases * (self.rate(tool, op) + sum(self.rate(other, op) for other in gated))


def load_costs(path: Path = SHIPPED_COSTS) -> CaseCosts:
    """The shipped table, or an empty one (case counts decide) when it is missing or unreadable."""
    try:
        doc = load_json_file(path)
        rates = {str(tool): {str(op): _rate(value) for op, value in ops.items()}
                 for tool, ops in (doc.get("rates") or {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return CaseCosts()
    return CaseCosts(rates=rates, source=str(doc.get("source") or ""))


def _rate(value: Any) -> float:
    """A rate as a table holds it: a finite number of seconds, not negative (ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"not a rate: {value!r}")
    return float(value)


def rates_from_discovery(doc: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """A saved discovery's seconds per listed case, by tool and op.

    Per (tool, op): the walls of its processes that ended by themselves, over the cases those
    processes held plus the cases routing spared (they cost nothing, and a table of listed cases
    must count them; an op routing spared whole costs 0). A process an interrupt stopped tells no
    rate, and an op with neither an ended process nor a spared case has none. A row that does not
    read as one (a damaged document in the home) is passed over."""
    tools = doc.get("tools") if isinstance(doc.get("tools"), list) else ()
    walls: dict[tuple[str, str], float] = {}
    held: dict[tuple[str, str], int] = {}
    for row in _rows(doc.get("processes")):
        key = _key(row)
        if key is None or key[0] not in tools or _INTERRUPTED in str(row.get("why") or ""):
            continue
        try:
            wall, cases = _rate(row.get("wall_s")), int(row.get("cases"))
        except (TypeError, ValueError):
            continue
        walls[key] = walls.get(key, 0.0) + wall
        held[key] = held.get(key, 0) + max(0, cases)
    spared: dict[tuple[str, str], int] = {}
    for case in _rows(doc.get("cases")):
        key = _key(case)
        if key is not None and case.get("state") == "spared":
            spared[key] = spared.get(key, 0) + 1
    out: dict[str, dict[str, float]] = {}
    for key in sorted(set(walls) | set(spared)):
        listed = held.get(key, 0) + spared.get(key, 0)
        if listed:
            out.setdefault(key[0], {})[key[1]] = round(walls.get(key, 0.0) / listed, 4)
    return out


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [row for row in value if isinstance(row, Mapping)] if isinstance(value, list) else []


def _key(row: Mapping[str, Any]) -> tuple[str, str] | None:
    tool, op = row.get("tool"), row.get("op")
    return (tool, op) if isinstance(tool, str) and isinstance(op, str) else None


def merged_rates(docs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Rates from several discoveries: each (tool, op) from the first that has it."""
    out: dict[str, dict[str, float]] = {}
    for doc in docs:
        for tool, ops in rates_from_discovery(doc).items():
            for op, rate in ops.items():
                out.setdefault(tool, {}).setdefault(op, rate)
    return out


def order_units(units: Sequence[Any], costs: CaseCosts, *,
                gated_by: Mapping[str, Sequence[str]] | None = None) -> list[Any]:
    """``units`` (each with tool, op, cases), heaviest estimate first; ``gated_by``: for a tool whose
    processes list the launches, the routed tools waiting on them."""
    gated_by = gated_by or {}

    def key(unit) -> tuple[float, int]:
        seconds = costs.unit_seconds(unit.tool, unit.op, len(unit.cases), gated=gated_by.get(unit.tool, ()))
        return -seconds, -sum(case_elements(params) for params in unit.cases)
    return sorted(units, key=key)


def discover_costs(home: Path, mode: str, *, shipped: Path = SHIPPED_COSTS) -> CaseCosts:
    """The rates a discovery orders its queue by: this machine's newest LOCAL_DISCOVERIES saved
    discoveries whose processes ran ``mode`` (``launch`` or ``test``: the CPU reference costs
    differently), newest first, then the shipped table for what they lack. A saved discovery that
    cannot be read is passed over: it only ever made the order better."""
    docs: list[Mapping[str, Any]] = []
    used: list[str] = []
    for run in reversed(RunStore(home).all_dirs()):
        if len(docs) >= LOCAL_DISCOVERIES:
            break
        if run.label != "discover":
            continue
        try:
            doc = load_json_file(run.path / DISCOVER_FILE)
        except (OSError, ValueError):
            continue
        if is_discovery(doc) and isinstance(doc.get("program"), Mapping) and doc["program"].get("mode") == mode:
            docs.append(doc)
            used.append(run.run_id)
    base = load_costs(shipped)
    local = merged_rates(docs)
    rates = {tool: {**base.rates.get(tool, {}), **local.get(tool, {})} for tool in {*base.rates, *local}}
    source = (f"this machine's discoveries {', '.join(used)}, then " if used else "") + (base.source or "no table")
    return CaseCosts(rates=rates, source=source)
