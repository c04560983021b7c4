"""`kvdiag scan`'s text: every case's verdict, the sites and instantiations hit, the counts.

It reads the scan as saved (`ScanResult.to_dict()`, a scan file), so a scan printed
as it ends and a merged scan of several shards (`kvdiag merge`) read the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tabulate import tabulate

from kvdiag.engine.scan.cases import ScanResult
from kvdiag.engine.scan.kernels import describe_values
from kvdiag.records.scan_program import ScanProgram
from kvdiag.report.templating import render


def render_scan(result: ScanResult, run_dir: Path) -> str:
    return render_scan_data(result.to_dict(), f"run: {run_dir}")


def _shard_line(d: Mapping[str, Any]) -> str:
    if d.get("shard"):
        origin = d.get("shard_from") or {}
        named = ", ".join(f"{k}={v}" for k, v in (origin.get("variables") or {}).items())
        return (f"shard {d['shard']}: {len(d['cases']) + len(d.get('not_run') or [])} of the "
                f"{len(d.get('selection') or [])} selected case(s), dealt by name"
                + (f" (from {origin.get('engine')}: {named})" if origin else ""))
    parts = d.get("merged_from") or []
    if parts:
        return f"merged from {len(parts)} shard(s): " + ", ".join(
            f"{p['shard']} ({p['cases']} case(s){', ' + p['host'] if p.get('host') else ''})" for p in parts)
    return ""


def phases_lines(d: Mapping[str, Any]) -> list[str]:
    """Which path ran (routed or not, and why not; overlapped or not) and what each phase cost; the cases
    whose launches differed between the phases. Nothing for a scan saved before scans had phases."""
    phases = d.get("phases")
    if not isinstance(phases, Mapping):
        return []
    detect = phases.get("detect") or {}
    route = phases.get("route")
    if not isinstance(route, Mapping):
        return [f"phases: not routed: {phases.get('why')}"]
    entry = d.get("entry")
    path = "routed, overlapped" if phases.get("overlap") else "routed"     # absent in scans saved before --overlap
    lines = [f"phases: {path}: route {route.get('cases')} case(s) in {route.get('processes')} process(es), "
             f"{float(route.get('wall_s') or 0):.1f} s: {route.get('reached')} reach {entry}'s kernels, "
             f"{route.get('not_reached')} reach none of {entry}'s kernels (judged without the sanitizer), "
             f"{len(route.get('unrouted') or {})} unrouted; detect {detect.get('cases')} case(s) under the "
             f"sanitizer in {detect.get('processes')} process(es), {float(detect.get('wall_s') or 0):.1f} s"]
    if route.get("start_failure"):
        lines.append(f"route: {route['start_failure']}")
    changes = phases.get("launch_changes") or []
    if changes:
        first = changes[0]
        lines.append(f"launches differed between the phases in {phases.get('launch_changed')} case(s), e.g. "
                     f"{first['case']}: only under the sanitizer: {', '.join(first['only_detect']) or '-'}; "
                     f"only in the route phase: {', '.join(first['only_route']) or '-'}")
    return lines


def render_scan_data(d: Mapping[str, Any], where: str) -> str:
    """The scan ``d`` as text; ``where`` is its last line (its run folder, or the merged file)."""
    cases = d["cases"]
    rows = [(c["verdict"], c["error_count"] if c.get("error_count") is not None else "-",
             ", ".join((c.get("sites") or [])[:2]) or "-", f"{c.get('duration_s') or 0:.1f}", params)
            for params, c in sorted(cases.items(), key=lambda kv: (kv[1]["verdict"], kv[0]))]
    counts = d["counts"]
    other = sum(n for k, n in counts.items() if k not in ("confirmed", "not-reproduced", "inconclusive"))
    per_device = [f"GPU {k}: {v['cases']} case(s), {v['affected']} affected, {v['case_s']:.1f} s of case time"
                  for k, v in (d.get("devices") or {}).items()]
    return render("scan.txt.j2", d=d, table=tabulate(rows, headers=["verdict", "errors", "site", "s", "case"]),
                  supported=len(cases) + len(d.get("not_run") or []), per_device=per_device,
                  shard_line=_shard_line(d), phases_lines=phases_lines(d),
                  again_reasons=list(dict.fromkeys(b["why_again"] for b in d.get("batches") or [] if b["why_again"])),
                  counts=counts, other=other, where=where, k=d.get("kernels"),
                  program=ScanProgram.from_dict(d.get("program")),
                  describe_values=describe_values,
                  inconclusive_reasons=[c["reason"] for c in cases.values() if c["verdict"] == "inconclusive"])
