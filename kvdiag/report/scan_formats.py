"""`kvdiag scan --format markdown|sarif`: the scan's kernel instantiations for a report or code scanning.

Markdown is for an upstream report or a pull request: the counts, then one table of the
instantiations (affected, clean, never reached) with the case dimensions that select them.
SARIF 2.1.0 gives one result per affected instantiation at the entry's source file (the
sanitizer's site when it printed one), so that code scanning lists "which kernels have it";
clean and never-reached instantiations ride in the run's properties, as they are not findings.
"""

from __future__ import annotations

import json
from typing import Any

from kvdiag import __version__
from kvdiag.engine.scan.cases import ScanResult
from kvdiag.engine.scan.kernels import describe_values
from kvdiag.registry.entry import Entry
from kvdiag.report.formats.sarif import SARIF_SCHEMA, SARIF_VERSION, SRCROOT, _artifact, fingerprint


def render_scan_markdown(result: ScanResult, entry: Entry) -> str:
    k = result.kernels or {}
    counts = result.to_dict()["counts"]
    lines = [f"## {entry.id} scan: {result.space.op} /{result.space.params}/", "",
             f"{len(result.results)} case(s) in {result.wall_s:.1f} s: **{len(result.affected)} affected**, "
             f"{counts['not-reproduced']} unaffected, {counts['inconclusive']} inconclusive.", ""]
    if result.program:
        lines += [f"Program: {result.program.get('path')}" + (f" ({result.program['why']})"
                                                             if result.program.get("why") else ""), ""]
    rows = [("affected", r) for r in k.get("affected", ())] + [("clean", r) for r in k.get("clean", ())]
    if rows or k.get("never_reached"):
        dims = ", ".join(k.get("dimensions", ()))
        lines += ["| status | cases | instantiation | " + (dims or "dimensions") + " |", "|---|---:|---|---|"]
        lines += [f"| {status} | {r['cases']} | `{r['instantiation']}` | {describe_values(r['values'])} |"
                  for status, r in rows]
        lines += [f"| never reached | 0 | `{name}` | |" for name in k.get("never_reached") or ()]
        lines.append("")
    if k and not k.get("launch_listed_cases"):
        lines += ["Launches were not listed in this scan: no instantiation can be called clean or never reached.", ""]
    return "\n".join(lines)


def _site_file(result: ScanResult) -> str | None:
    sites = list(result.sites().values())
    return sites[0]["site"].rpartition(":")[0] if sites else None


def render_scan_sarif(result: ScanResult, entry: Entry) -> str:
    k = result.kernels or {}
    known = [str(f) for f in entry.location.get("files", ())]
    site = _site_file(result)
    location = _artifact(site, known) if site else ({"uri": known[0], "uriBaseId": SRCROOT} if known else None)
    results: list[dict[str, Any]] = []
    for row in k.get("affected", ()):
        result_item: dict[str, Any] = {
            "ruleId": entry.id, "ruleIndex": 0, "level": "error",
            "message": {"text": f"{entry.id}: {row['instantiation']} affected in {row['cases']} case(s) "
                                f"({describe_values(row['values'])})"},
            "partialFingerprints": {"kvdiag/v1": fingerprint(entry.id, site or "", row["instantiation"])},
            "properties": {"instantiation": row["instantiation"], "cases": row["cases"], "values": row["values"]},
        }
        if location:
            result_item["locations"] = [{"physicalLocation": {"artifactLocation": location}}]
        results.append(result_item)
    run = {
        "tool": {"driver": {"name": "kvdiag", "version": __version__,
                            "rules": [{"id": entry.id, "shortDescription": {"text": entry.title}}]}},
        "originalUriBaseIds": {SRCROOT: {"description": {"text": "the scanned build's source tree"}}},
        "results": results,
        "properties": {"op": result.space.op, "params": result.space.params, "cases": len(result.results),
                       "affected_cases": len(result.affected), "clean": k.get("clean", []),
                       "never_reached": k.get("never_reached"), "program": result.program},
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}, indent=2, default=str)
