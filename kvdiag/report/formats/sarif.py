"""SARIF 2.1.0: confirmed defects as code-scanning results at their sanitizer sites.

One run; `tool.driver` is kvdiag with one rule per entry of the sweep (id, and
the title as shortDescription). Results: each distinct sanitizer site of a
confirmed entry, at its file:line, level error, the message quoting the
finding; a confirmed entry with no site (an abort, a failing case) still gets
one result, located at the entry's own source file (an entry that names no
file, a build entry such as D13's staleness, at the tree's root
``CMakeLists.txt``: GitHub code scanning wants a location on every result).
Other verdicts produce no
result (they are not findings), but the run's properties carry every verdict,
and `executionSuccessful` is false when kvdiag itself failed on some entry.

What GitHub code scanning and VS Code's SARIF viewer need to place a result:

* every artifact URI is relative to ``SRCROOT``, the root of the swept source
  tree (declared in `originalUriBaseIds`); the path is the one that exists in
  that tree (``src/ggml-cuda/…`` in ggml, ``ggml/src/ggml-cuda/…`` in llama.cpp,
  see `kvdiag.store.source_paths`); no absolute local path is ever written;
* compute-sanitizer prints a site as a basename (``fattn-mma-f16.cuh:1538``):
  the entry's file of that basename gives its path;
* `partialFingerprints` (``kvdiag/v1``) hash the entry, the site and the kernel
  instantiation, never line numbers of logs or run ids, so the same finding
  in the next run is the same alert.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from urllib.parse import quote
from typing import Any, Mapping

from kvdiag.records.sweep import SweepOutcome
from kvdiag.records.verdict import Verdict
from kvdiag.report.formats import SweepFormatter, clip, entry_view, strip_ansi
from kvdiag.store.source_paths import source_paths
from kvdiag.store.sweeps import Sweep, target_summary

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"
SRCROOT = "SRCROOT"
FINGERPRINT_KEY = "kvdiag/v1"


def _artifact(file: str, known: list[str]) -> dict[str, str] | None:
    """The artifactLocation of a site relative to SRCROOT: the entry's path for its basename, else
    the printed path when it is relative; None for an absolute path kvdiag cannot place."""
    file = file.replace("\\", "/")
    name = posixpath.basename(file)
    for path in known:
        if posixpath.basename(path) == name:
            return {"uri": quote(path), "uriBaseId": SRCROOT}
    if file.startswith("/") or ":" in file.split("/")[0]:
        return None
    return {"uri": quote(posixpath.normpath(file)), "uriBaseId": SRCROOT}


#: where a confirmed entry that names no source file is placed: the build's root file, in every layout
BUILD_FILE = "CMakeLists.txt"


def _entry_location(known: list[str], *, build_file: bool = False) -> list[dict[str, Any]]:
    """The entry's first file; with ``build_file``, `BUILD_FILE` for an entry that names none."""
    file = known[0] if known else BUILD_FILE if build_file else None
    return [{"physicalLocation": {"artifactLocation": {"uri": quote(file), "uriBaseId": SRCROOT}}}] if file else []


def _instantiation(site: Mapping[str, Any]) -> str:
    """``kernel<args>``: the template instantiation the site was reported in."""
    args = site.get("template_args") or ()
    kernel = str(site.get("kernel") or "")
    return f"{kernel}<{', '.join(str(a) for a in args)}>" if args else kernel


def fingerprint(entry: str, site: str, instantiation: str) -> str:
    """Stable across runs: the same entry, site and instantiation hash the same."""
    return hashlib.sha256("\0".join((entry, site, instantiation)).encode("utf-8")).hexdigest()


def _utc(stamp: str) -> str | None:
    """SARIF wants UTC date-times; sweeps store ISO 8601 with +00:00."""
    if not stamp:
        return None
    return stamp[:-6] + "Z" if stamp.endswith("+00:00") else stamp


def _site_results(outcome: SweepOutcome, rule_index: int, known: list[str]) -> list[dict[str, Any]]:
    seen: dict[tuple, dict[str, Any]] = {}
    for attempt in outcome.attempts:
        if attempt.verdict is not Verdict.CONFIRMED:
            continue
        evidence = attempt.evidence
        errors = evidence.error_count
        quoted = [strip_ansi(str(q)) for q in evidence.quoted]
        for site in evidence.sites:
            key = (site.get("file"), site.get("line"), site.get("kind"), site.get("kernel"))
            if key in seen:
                continue
            kind = site.get("kind") or "finding"
            finding = next((q.lstrip("= ").strip() for q in quoted if q.strip(" =")), None)
            text = (f"{outcome.entry_id}: {'?' if errors is None else errors} sanitizer error(s); "
                    f"{kind} at {site.get('site') or '?'} in {site.get('kernel') or '?'}")
            if finding:
                text += f": \"{clip(finding, 200)}\""
            result: dict[str, Any] = {
                "ruleId": outcome.entry_id, "ruleIndex": rule_index, "level": "error", "message": {"text": text},
                "properties": {"verdict": "confirmed", "kind": kind, "errorCount": errors,
                               "printedFindings": site.get("count"), "blocks": site.get("blocks"),
                               "kernel": site.get("kernel"), "k": outcome.k, "n": outcome.n,
                               **_range_property(outcome)},
            }
            if getattr(evidence, "launched", ()):
                result["properties"]["launched"] = list(evidence.launched)
            artifact = _artifact(str(site["file"]), known) if site.get("file") else None
            if artifact is not None:
                physical: dict[str, Any] = {"artifactLocation": artifact}
                if isinstance(site.get("line"), int) and site["line"] >= 1:
                    physical["region"] = {"startLine": site["line"]}
                locations = [{"physicalLocation": physical}]
            else:
                locations = _entry_location(known)
            if site.get("kernel"):
                logical = [{"name": strip_ansi(str(site["kernel"])), "kind": "function"}]
                if locations:
                    locations[0]["logicalLocations"] = logical
                else:
                    locations = [{"logicalLocations": logical}]
            result["locations"] = locations
            where = (f"{artifact['uri']}:{site.get('line') or ''}" if artifact
                     else posixpath.basename(str(site.get("site") or site.get("file") or "")))
            result["partialFingerprints"] = {FINGERPRINT_KEY: fingerprint(
                outcome.entry_id, f"{where}|{kind}", _instantiation(site))}
            seen[key] = result
    return list(seen.values())


def _range_property(outcome: SweepOutcome) -> dict[str, Any]:
    """A result's ``affectedRange`` property: what the entry's affected ranges say about the swept tree."""
    if outcome.range is None:
        return {}
    return {"affectedRange": {"status": outcome.range.status, "summary": outcome.range.summary,
                              "head": outcome.range.head}}


def _entry_result(outcome: SweepOutcome, rule_index: int, known: list[str]) -> dict[str, Any]:
    view = entry_view(outcome)
    text = f"{view.id} confirmed ({view.k_of_n} runs): {view.reason}"
    if view.quoted:
        text += f": \"{clip(view.quoted[0], 200)}\""
    instantiation = view.instantiations[0] if view.instantiations else ""
    result: dict[str, Any] = {
        "ruleId": view.id, "ruleIndex": rule_index, "level": "error", "message": {"text": text},
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(view.id, known[0] if known else "", instantiation)},
        "properties": {"verdict": "confirmed", "k": outcome.k, "n": outcome.n, **_range_property(outcome)}}
    if view.launched:
        result["properties"]["launched"] = list(view.launched)
    result["locations"] = _entry_location(known, build_file=True)
    return result


class SarifFormat(SweepFormatter):
    suffix = ".sarif"

    def format(self, sweep: Sweep) -> str:
        t = target_summary(sweep.target)
        rules, results = [], []
        for index, outcome in enumerate(sweep.outcomes):
            rules.append({"id": outcome.entry_id, "name": outcome.entry_id,
                          "shortDescription": {"text": outcome.title or outcome.entry_id},
                          "defaultConfiguration": {"level": "error"}})
            if outcome.verdict is not Verdict.CONFIRMED:
                continue
            known = source_paths(outcome, sweep.target)
            found = _site_results(outcome, index, known)
            results += found or [_entry_result(outcome, index, known)]
        invocation: dict[str, Any] = {
            "executionSuccessful": not sweep.interrupted and not any(o.verdict is Verdict.ERROR for o in sweep.outcomes)}
        if _utc(sweep.started_at):
            invocation["startTimeUtc"] = _utc(sweep.started_at)
        run = {
            "tool": {"driver": {"name": "kvdiag", "version": sweep.kvdiag_version, "rules": rules}},
            "originalUriBaseIds": {SRCROOT: {"description": {
                "text": "The root of the swept source tree" + (f" at commit {t.commit}" if t.commit else "")
                        + ": every artifact URI is relative to it."}}},
            "invocations": [invocation],
            "results": results,
            "properties": {
                "verdicts": {o.entry_id: o.verdict.value for o in sweep.outcomes},
                "counts": sweep.counts(), "shard": sweep.shard,
                "build": {"commit": t.commit, "dirty": t.dirty, "cudaArchitectures": t.cuda_architectures,
                          "cudaFlags": t.cuda_flags, "lineinfo": t.lineinfo},
                "environment": {"gpu": t.gpu_name, "cc": t.cc, "driver": t.driver, "runtime": t.runtime,
                                "computeSanitizer": t.sanitizer_version, "nvcc": t.nvcc, "machineKey": t.machine_key},
            },
        }
        ranges = {o.entry_id: o.range.summary for o in sweep.outcomes if o.range is not None}
        if ranges:   # sweeps of kvdiag before affected ranges were evidence have none
            run["properties"]["ranges"] = ranges
        launched = {o.entry_id: list(entry_view(o).launched) for o in sweep.outcomes if entry_view(o).launched}
        if launched:   # the kernels each verdict's run launched (the launch probe), when it listed them
            run["properties"]["launched"] = launched
        doc = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
        return json.dumps(doc, indent=2, default=str) + "\n"
