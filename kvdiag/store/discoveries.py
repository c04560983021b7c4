"""The saved discovery: one JSON file per `kvdiag discover` (or per shard of one), and their merge.

A discovery file is ``DiscoverResult.to_dict()`` under its own format name: every case's record
(tool, op, params, state, findings), the processes, and what the tree said about the printed
paths and source lines. The roots are rebuilt from the cases wherever the file is read, so
shards saved on several machines merge anywhere into the roots an unsharded run gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from kvdiag.errors import DataError, UsageError
from kvdiag.shards import Part, check_dealt, complete_split, parse_shard
from kvdiag.store.scans import check_format, save_document, span
from kvdiag.store.sweeps import check_same_target

DISCOVER_FORMAT = "kvdiag-discover/1"
DISCOVER_FILE = "discover.json"        # a discovery's document in its run folder
_STATES = ("clean", "findings", "aborted", "not-supported", "spared", "cut")


def is_discovery(data: Any) -> bool:
    return isinstance(data, Mapping) and data.get("format") == DISCOVER_FORMAT


def save_discovery(document: Mapping[str, Any], path: Path) -> Path:
    return save_document(document, path, DISCOVER_FORMAT)


def check_discovery(data: Any, source: str) -> dict[str, Any]:
    """``data`` if it reads as a saved discovery, else a DataError naming ``source``."""
    check_format(data, source, DISCOVER_FORMAT, "discovery")
    cases = data.get("cases")
    if not isinstance(cases, list) or not all(
            isinstance(c, Mapping) and isinstance(c.get("tool"), str) and isinstance(c.get("op"), str)
            and isinstance(c.get("params"), str) and c.get("state") in _STATES
            and isinstance(c.get("findings") or [], list) for c in cases):
        raise DataError(f"{source}: 'cases' must be a list of case records (tool, op, params, state, findings)")
    return dict(data)


def merge_discoveries(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Shards 1..n of one discovery of one target -> the discovery an unsharded run gives.

    Refuses (UsageError): a file that is not a shard, shards of different splits, tools or targets,
    a missing, repeated or interrupted shard, and a case in two shards or in the wrong one."""
    parts = list(parts)
    if not parts:
        raise UsageError("nothing to merge: give the shards' discovery files")
    count = complete_split([Part(p.get("shard"), bool(p.get("interrupted")),
                                 f"discovery #{i} (started {p.get('started_at') or '?'})")
                            for i, p in enumerate(parts, start=1)], "kvdiag discover", "the suite")
    first = parts[0]
    for other in parts[1:]:
        pair = f"shards {first['shard']} and {other['shard']}"
        if sorted(first.get("tools") or []) != sorted(other.get("tools") or []):
            raise UsageError(f"{pair} ran different tools: {first.get('tools')} vs {other.get('tools')}")
        check_same_target(pair, first.get("target") or {}, other.get("target") or {})
    seen: dict[tuple[str, str, str], str] = {}
    for part in parts:
        for case in part["cases"]:
            name = f"{case['op']}({case['params']})"
            check_dealt(seen, (case["tool"], case["op"], case["params"]), name, part["shard"], count,
                        shown=f"{name} under {case['tool']}")
    selections = {int((p.get("space") or {}).get("selection") or 0) for p in parts}
    if len(selections) != 1:
        raise UsageError("the shards come from different selections of cases (another build's listing, or --ops)")
    wanted = selections.pop() * len(first.get("tools") or ())
    if len(seen) != wanted:
        raise UsageError(f"incomplete: the shards hold {len(seen)} case run(s) of the {wanted} selected")
    started_at, wall_s = span(parts)
    space = dict(first.get("space") or {})
    ops: dict[str, int] = {}
    for part in parts:
        for op, n in ((part.get("space") or {}).get("ops") or {}).items():
            ops[op] = ops.get(op, 0) + int(n)
    space.update(ops=ops, cases=sum(ops.values()))
    return {**{k: v for k, v in first.items() if k not in ("roots", "warnings", "totals")},
            "format": DISCOVER_FORMAT, "shard": None, "started_at": started_at, "wall_s": wall_s, "space": space,
            "workers": sum(int(p.get("workers") or 0) for p in parts), "interrupted": False,
            "processes": [row for p in parts for row in p.get("processes") or []],
            "numeric_runs": [row for p in parts for row in p.get("numeric_runs") or []],
            "frames": [row for p in parts for row in p.get("frames") or []],
            "program": merged_program(parts),
            "routing": merged_routing(parts),
            "backtrace": merged_backtrace(parts),
            "racecheck_workers": merged_racecheck_workers(parts),
            "occupancy": None,          # each shard's processes ran on its own machine and clock
            "mps": merged_mps(parts),
            "order": merged_order(parts),
            "relative": {k: v for p in parts for k, v in (p.get("relative") or {}).items()},
            "source_lines": {k: v for p in parts for k, v in (p.get("source_lines") or {}).items()},
            "cases": [c for p in parts for c in p["cases"]],
            "merged_from": [{"shard": p["shard"], "started_at": p.get("started_at"), "wall_s": p.get("wall_s"),
                             "cases": len(p["cases"])} for p in sorted(parts, key=lambda p: parse_shard(p["shard"]))]}


def merged_racecheck_workers(parts: Sequence[Mapping[str, Any]]) -> int | None:
    """The shards' --racecheck-workers when they all ran one, else None: a setting of speed, not of what
    the tool finds, so shards that differ in it merge like any others."""
    values = {saved_count(p.get("racecheck_workers")) for p in parts}
    return values.pop() if len(values) == 1 else None


def merged_order(parts: Sequence[Mapping[str, Any]]) -> str:
    """The costs that ordered every shard's queue when they all name the same, else "" (each shard
    read its own machine's history)."""
    values = {p.get("order") if isinstance(p.get("order"), str) else "" for p in parts}
    return values.pop() if len(values) == 1 else ""


def merged_mps(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The shards' MPS record when every shard ran under the same daemon folder, else None: the merged
    document cannot say which of its processes shared a GPU's server."""
    records = [p.get("mps") if isinstance(p.get("mps"), Mapping) else None for p in parts]
    return dict(records[0]) if records and records[0] is not None and all(r == records[0] for r in records) else None


def saved_count(value: Any) -> int | None:
    """A saved count as it is, anything else (absent in an older document, a string, a list from a damaged
    file) as None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def merged_routing(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Racecheck's routing over the shards (engine.discover.routing): the case runs sanitized and spared
    added up, and the shards' reasons when they routed differently (one could not use the probe)."""
    routings = [dict(p.get("routing") or {}) for p in parts]
    counts = {key: sum(int(r.get(key) or 0) for r in routings) for key in ("sanitized", "spared")}
    plans = {(tuple(r.get("routed") or ()), r.get("source"), r.get("why")) for r in routings}
    if len(plans) == 1:
        routed, source, why = plans.pop()
        return {"routed": list(routed), "source": source, "why": why, **(counts if routed else {})}
    said = "; ".join(f"shard {p.get('shard')}: {(p.get('routing') or {}).get('why') or 'not recorded'}"
                     for p in sorted(parts, key=lambda p: parse_shard(p["shard"])))
    routed = sorted({t for r in routings for t in r.get("routed") or ()})
    return {"routed": routed, "source": "mixed", "why": f"the shards routed differently ({said})", **counts}


def merged_backtrace(parts: Sequence[Mapping[str, Any]]) -> str:
    """The shards' --backtrace when they all ran one (a record without it ran every tool with device
    frames), else "mixed": which tools' records lack frames then differs by shard."""
    values = {str(p.get("backtrace") or "device") for p in parts}
    return values.pop() if len(values) == 1 else "mixed"    # as merged_routing and merged_program say it


def merged_program(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The program the shards ran (engine.discover.program): the first shard's when every shard ran the
    same mode, else a record that says which shard ran which (a shard on a machine where the launch probe
    could not be made ran test mode)."""
    programs = [p.get("program") for p in parts]
    modes = {(prog or {}).get("mode") for prog in programs}
    if len(modes) == 1:
        return programs[0]
    said = ", ".join(f"shard {p.get('shard')}: {(p.get('program') or {}).get('mode') or 'not recorded'}"
                     for p in sorted(parts, key=lambda p: parse_shard(p["shard"])))
    return {"path": None, "mode": "mixed", "why": f"the shards ran different modes ({said})", "probe": None}

