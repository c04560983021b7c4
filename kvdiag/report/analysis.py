"""`kvdiag analyze LOG`: the parsers applied to a sanitizer log the user already has."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.sanitizer import instantiations, parse_sanitizer
from kvdiag.report.templating import render


def read_log(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def analyze_log(path: Path, *, tool: str | None, fmt: str) -> str:
    text = read_log(path)
    report = parse_sanitizer(text, tool=tool)
    cases = parse_backend_ops(text)
    if fmt == "json":
        data = {
            "file": str(path),
            "sanitizer": {
                "tool": report.tool, "error_count": report.error_count, "not_printed": report.not_printed,
                "printed": report.printed_count, "has_summary": report.has_summary,
                "tool_errors": list(report.tool_errors),
                "racecheck": report.racecheck.to_dict() if report.racecheck else None,
                "sites": [s.to_dict() for s in report.sites],
                "instantiations": list(instantiations(report)),
            },
            "test_cases": {"matched": len(cases.cases), "executed": cases.executed, "failed": cases.failed,
                           "not_supported": cases.not_supported,
                           "running_case": cases.running_case.case_string if cases.running_case else None},
        }
        return json.dumps(data, indent=2, default=str) + "\n"
    return render("analysis.txt.j2", path=path, r=report, cases=cases, insts=instantiations(report))
