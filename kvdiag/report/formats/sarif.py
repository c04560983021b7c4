"""SARIF 2.1.0: confirmed defects as code-scanning results at their sanitizer sites.

One run; `tool.driver` is kvdiag with one rule per entry of the sweep (id, and
the title as shortDescription). Results: each distinct sanitizer site of a
confirmed entry, at its file:line (`physicalLocation.artifactLocation.uri` +
`region.startLine`), level error, the message quoting the finding; a
confirmed entry with no site (an abort, a failing case) still gets one result,
without a location. Other verdicts produce no result — they are not findings —
but the run's properties carry every verdict, and `executionSuccessful` is
false when kvdiag itself failed on some entry.

compute-sanitizer prints sites as a basename (``fattn-mma-f16.cuh:1538``);
when the entry names a source file with that basename, its repository path
(``src/ggml-cuda/fattn-mma-f16.cuh``) is the uri, relative to ``SRCROOT``.
"""

from __future__ import annotations

import json
import posixpath
from urllib.parse import quote
from typing import Any, Mapping

from kvdiag.report.formats import SweepFormatter, clip, entry_view, strip_ansi
from kvdiag.store.sweeps import Sweep, target_summary

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"


def _artifact(file: str, known: list[str]) -> dict[str, str]:
    """The artifactLocation of a site: the entry's repository path for its basename, relative to SRCROOT."""
    file = file.replace("\\", "/")
    name = posixpath.basename(file)
    for path in known:
        if posixpath.basename(path) == name:
            return {"uri": quote(path), "uriBaseId": "SRCROOT"}
    if file.startswith("/"):
        return {"uri": "file://" + quote(file)}
    return {"uri": quote(file), "uriBaseId": "SRCROOT"}


def _utc(stamp: str) -> str | None:
    """SARIF wants UTC date-times; sweeps store ISO 8601 with +00:00."""
    if not stamp:
        return None
    return stamp[:-6] + "Z" if stamp.endswith("+00:00") else stamp


def _site_results(outcome: Mapping[str, Any], rule_index: int) -> list[dict[str, Any]]:
    known = [str(f) for f in outcome.get("files") or ()]
    seen: dict[tuple, dict[str, Any]] = {}
    for attempt in outcome.get("attempts") or ():
        if attempt.get("verdict") != "confirmed":
            continue
        evidence = attempt.get("evidence") or {}
        quoted = [strip_ansi(str(q)) for q in evidence.get("quoted") or ()]
        for site in evidence.get("sites") or ():
            key = (site.get("file"), site.get("line"), site.get("kind"), site.get("kernel"))
            if key in seen:
                continue
            kind = site.get("kind") or "finding"
            finding = next((q.lstrip("= ").strip() for q in quoted if q.strip(" =")), None)
            text = (f"{outcome['entry']}: {evidence.get('error_count', '?')} sanitizer error(s); "
                    f"{kind} at {site.get('site') or '?'} in {site.get('kernel') or '?'}")
            if finding:
                text += f": \"{clip(finding, 200)}\""
            result: dict[str, Any] = {
                "ruleId": outcome["entry"], "ruleIndex": rule_index, "level": "error", "message": {"text": text},
                "properties": {"verdict": "confirmed", "kind": kind, "errorCount": evidence.get("error_count"),
                               "printedFindings": site.get("count"), "blocks": site.get("blocks"),
                               "kernel": site.get("kernel"), "k": outcome.get("k"), "n": outcome.get("n")},
            }
            if site.get("file"):
                physical: dict[str, Any] = {"artifactLocation": _artifact(str(site["file"]), known)}
                if isinstance(site.get("line"), int) and site["line"] >= 1:
                    physical["region"] = {"startLine": site["line"]}
                result["locations"] = [{"physicalLocation": physical}]
            elif site.get("kernel"):
                result["locations"] = [{"logicalLocations": [{"name": str(site["kernel"]), "kind": "function"}]}]
            seen[key] = result
    return list(seen.values())


def _entry_result(outcome: Mapping[str, Any], rule_index: int) -> dict[str, Any]:
    view = entry_view(outcome)
    text = f"{view.id} confirmed ({view.k_of_n} runs): {view.reason}"
    if view.quoted:
        text += f": \"{clip(view.quoted[0], 200)}\""
    return {"ruleId": view.id, "ruleIndex": rule_index, "level": "error", "message": {"text": text},
            "properties": {"verdict": "confirmed", "k": outcome.get("k"), "n": outcome.get("n")}}


class SarifFormat(SweepFormatter):
    suffix = ".sarif"

    def format(self, sweep: Sweep) -> str:
        t = target_summary(sweep.target)
        rules, results = [], []
        for index, outcome in enumerate(sweep.outcomes):
            rules.append({"id": outcome["entry"], "name": outcome["entry"],
                          "shortDescription": {"text": str(outcome.get("title") or outcome["entry"])},
                          "defaultConfiguration": {"level": "error"}})
            if outcome["verdict"] != "confirmed":
                continue
            found = _site_results(outcome, index)
            results += found or [_entry_result(outcome, index)]
        invocation: dict[str, Any] = {
            "executionSuccessful": not sweep.interrupted and not any(o["verdict"] == "error" for o in sweep.outcomes)}
        if _utc(sweep.started_at):
            invocation["startTimeUtc"] = _utc(sweep.started_at)
        run = {
            "tool": {"driver": {"name": "kvdiag", "version": sweep.kvdiag_version, "rules": rules}},
            "invocations": [invocation],
            "results": results,
            "properties": {
                "verdicts": {o["entry"]: o["verdict"] for o in sweep.outcomes},
                "counts": sweep.counts(), "shard": sweep.shard,
                "build": {"commit": t.commit, "dirty": t.dirty, "cudaArchitectures": t.cuda_architectures,
                          "cudaFlags": t.cuda_flags, "lineinfo": t.lineinfo},
                "environment": {"gpu": t.gpu_name, "cc": t.cc, "driver": t.driver, "runtime": t.runtime,
                                "computeSanitizer": t.sanitizer_version, "nvcc": t.nvcc, "machineKey": t.machine_key},
            },
        }
        doc = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
        return json.dumps(doc, indent=2, default=str) + "\n"
