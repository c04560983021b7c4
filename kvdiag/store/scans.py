"""The saved scan: one JSON file per `kvdiag scan` (or per shard of one), and the merge of shards.

A scan file is the scan's own aggregate (`ScanResult.to_dict()`: every case's
verdict, the sites and instantiations, the counts) with a header: the format,
kvdiag's version and the target. `kvdiag scan --shard i/n` runs the cases of
one shard (`kvdiag.shards.case_shard`: by the case's name alone) and records
the whole `selection`, so `merge_scans` can prove that shards 1..n of one scan,
of one target, together judged every case exactly once. It works on the saved
dicts, never on live engine values, so shards saved on several machines merge
anywhere.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvdiag.errors import DataError, UsageError
from kvdiag.fileio import output_target, read_json
from kvdiag.records.verdict import Verdict
from kvdiag.shards import Part, check_dealt, complete_split, parse_shard
from kvdiag.store.runs import write_json_atomic
from kvdiag.store.sweeps import check_same_target

SCAN_FORMAT = "kvdiag-scan/1"
VERDICTS = tuple(v.value for v in Verdict)
_SAME = ("entry", "op", "params")      # what the shards of one scan share, besides target and selection


def is_scan(data: Any) -> bool:
    return isinstance(data, Mapping) and data.get("format") == SCAN_FORMAT


def save_document(document: Mapping[str, Any], path: Path, fmt: str) -> Path:
    """Write a saved document under its ``format`` name atomically, only onto a regular file or a new
    path; returns the file written (a symlink's target: see kvdiag.fileio)."""
    output_target(Path(path))
    return write_json_atomic(Path(path), {"format": fmt, **document})


def check_format(data: Any, source: str, fmt: str, what: str) -> None:
    """A DataError naming ``source`` unless ``data`` is a JSON object of format ``fmt``."""
    if not (isinstance(data, Mapping) and data.get("format") == fmt):
        found = data.get("format") if isinstance(data, Mapping) else None
        raise DataError(f"{source}: not a kvdiag {what} (format {found!r}, expected {fmt})")


def save_scan(document: Mapping[str, Any], path: Path) -> Path:
    return save_document(document, path, SCAN_FORMAT)


def check_scan(data: Any, source: str) -> dict[str, Any]:
    """``data`` if it reads as a saved scan, else a DataError naming ``source``."""
    check_format(data, source, SCAN_FORMAT, "scan")
    cases = data.get("cases")
    if not isinstance(cases, Mapping) or not all(isinstance(c, Mapping) and c.get("verdict") in VERDICTS
                                                 for c in cases.values()):
        raise DataError(f"{source}: 'cases' must map each case to an object with a verdict")
    for key in _SAME:
        if not isinstance(data.get(key), str):
            raise DataError(f"{source}: {key!r} must be a string")
    return dict(data)


def load_scan(path: Path) -> dict[str, Any]:
    return check_scan(read_json(path, "scan"), str(path))


# --------------------------------------------------------------------------- merging shards


def merge_scans(scans: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Shards 1..n of one scan of one target -> the scan that running it unsharded gives.

    Refuses (UsageError, naming the problem): a scan that is not a shard, shards of
    different counts, entries, ops, params, selections or targets, a missing or repeated
    shard, an interrupted shard, a case in two shards or in the wrong one, and a
    selected case that no shard judged.
    """
    scans = list(scans)
    if not scans:
        raise UsageError("nothing to merge: give the shards' scan files")
    count = complete_split([Part(s.get("shard"), bool(s.get("interrupted")),
                                 f"scan #{i} ({s.get('entry')}, started {s.get('started_at') or '?'})")
                            for i, s in enumerate(scans, start=1)], "kvdiag scan", "the scan")
    first = scans[0]
    for s in scans[1:]:
        _check_same(first, s)
    seen: dict[str, str] = {}
    for s in scans:
        for case in list(s["cases"]) + list(s.get("not_run") or []):
            check_dealt(seen, case, case, s["shard"], count)
    absent = [c for c in first.get("selection") or [] if c not in seen]
    if absent:
        raise UsageError(f"incomplete: no shard judged {len(absent)} selected case(s), e.g. {absent[0]}")
    return _merged(scans, count)


def _check_same(first: Mapping[str, Any], other: Mapping[str, Any]) -> None:
    pair = f"shards {first['shard']} and {other['shard']}"
    for key in _SAME:
        if first[key] != other[key]:
            raise UsageError(f"{pair} scanned different {key}s: {first[key]!r} vs {other[key]!r}")
    check_same_target(pair, first.get("target") or {}, other.get("target") or {})
    if sorted(first.get("selection") or []) != sorted(other.get("selection") or []):
        raise UsageError(f"{pair} come from different selections of cases (another build's listing, or --limit)")


def _summed(rows: Iterable[Mapping[str, Any]], key: str, fields: Sequence[str]) -> list[dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        merged = out.setdefault(row[key], {**row, **{f: 0 for f in fields}})
        for f in fields:
            merged[f] = round(merged[f] + (row.get(f) or 0), 3)
    return list(out.values())


def span(scans: Sequence[Mapping[str, Any]]) -> tuple[str, float]:
    """The earliest start and the wall time from it to the last shard's end."""
    times = [(_parse_time(s.get("started_at")), float(s.get("wall_s") or 0.0)) for s in scans]
    if all(t is not None for t, _ in times):
        begin = min(t for t, _ in times)
        return begin.isoformat(), round(max(t.timestamp() + w for t, w in times) - begin.timestamp(), 3)
    return min(str(s.get("started_at") or "") for s in scans), max(w for _, w in times)


def _merged(scans: Sequence[Mapping[str, Any]], count: int) -> dict[str, Any]:
    first = scans[0]
    cases = {c: v for s in scans for c, v in s["cases"].items()}
    started_at, wall_s = span(scans)
    instantiations: dict[str, int] = {}
    for s in scans:
        for name, n in (s.get("instantiations") or {}).items():
            instantiations[name] = instantiations.get(name, 0) + n
    devices: dict[str, Any] = {}
    for s in scans:
        for key, row in (s.get("devices") or {}).items():
            merged = devices.setdefault(key, {**row, "cases": 0, "affected": 0, "case_s": 0.0})
            for f in ("cases", "affected", "case_s"):
                merged[f] = round(merged[f] + row.get(f, 0), 3)
    return {
        "format": SCAN_FORMAT, "kvdiag_version": first.get("kvdiag_version"), "target": first.get("target"),
        **{k: first[k] for k in _SAME},
        "workers": sum(int(s.get("workers") or 0) for s in scans), "wall_s": wall_s,
        "sum_case_s": round(sum(float(s.get("sum_case_s") or 0) for s in scans), 3),
        "interrupted": False, "sanitizer_output": first.get("sanitizer_output"),
        "batch_size": max(int(s.get("batch_size") or 1) for s in scans),
        "processes": sum(int(s.get("processes") or 0) for s in scans),
        "batches": [b for s in scans for b in s.get("batches") or []],
        "ran_alone_after_batch": sum(int(s.get("ran_alone_after_batch") or 0) for s in scans),
        "cases": dict(sorted(cases.items())),
        "not_supported": list(first.get("not_supported") or []),
        "not_run": sorted(c for s in scans for c in s.get("not_run") or []),
        "sites": _summed((r for s in scans for r in s.get("sites") or []), "site", ("cases", "printed", "errors")),
        "instantiations": dict(sorted(instantiations.items(), key=lambda kv: (-kv[1], kv[0]))),
        "counts": {v: sum(1 for c in cases.values() if c["verdict"] == v) for v in VERDICTS},
        "devices": devices, "started_at": started_at, "shard": None, "shard_from": None,
        **({"range": first["range"]} if first.get("range") else {}),   # one target, so one tree and range
        "phases": merged_phases(scans),
        "merged_from": [{"shard": s["shard"], "shard_from": s.get("shard_from"), "started_at": s.get("started_at"),
                         "wall_s": s.get("wall_s"), "cases": len(s["cases"]),
                         "host": ((s.get("target") or {}).get("environment") or {}).get("host", {}).get("hostname")}
                        for s in sorted(scans, key=lambda s: parse_shard(s["shard"]))],
    }


def merged_phases(scans: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The shards' phases as one scan's (engine.scan.phases): each phase's cases, processes and the
    routing counts summed, walls the longest shard's, overlapped if every shard's phases were; None unless
    every shard ran the same path."""
    parts = [s.get("phases") for s in scans]
    if not all(isinstance(p, Mapping) for p in parts) or len({p.get("path") for p in parts}) != 1:
        return None
    first = parts[0]
    out = {**first, "launch_changes": [c for p in parts for c in p.get("launch_changes") or []],
           "launch_changed": sum(int(p.get("launch_changed") or 0) for p in parts),
           "detect": _phase_sum([p.get("detect") or {} for p in parts])}
    if any("overlap" in p for p in parts):      # overlapped only if every shard was (absent before --overlap)
        out["overlap"] = all(bool(p.get("overlap")) for p in parts)
    if isinstance(first.get("route"), Mapping):
        routes = [p["route"] for p in parts]
        out["route"] = {**_phase_sum(routes), "reached": sum(int(r.get("reached") or 0) for r in routes),
                        "not_reached": sum(int(r.get("not_reached") or 0) for r in routes),
                        "unrouted": {c: w for r in routes for c, w in (r.get("unrouted") or {}).items()},
                        "batches": [b for r in routes for b in r.get("batches") or []],
                        "not_started": sum(int(r.get("not_started") or 0) for r in routes),
                        "start_failure": next((r["start_failure"] for r in routes if r.get("start_failure")), None)}
    return out


def _phase_sum(phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"cases": sum(int(p.get("cases") or 0) for p in phases),
            "processes": sum(int(p.get("processes") or 0) for p in phases),
            "wall_s": max((float(p.get("wall_s") or 0.0) for p in phases), default=0.0)}


def _parse_time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
