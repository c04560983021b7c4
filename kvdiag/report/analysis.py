"""`kvdiag analyze LOG`: the parsers applied to a sanitizer log the user already has."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from kvdiag.errors import DataError

from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.sanitizer import instantiations, parse_sanitizer
from kvdiag.report.templating import render


MAX_LOG_BYTES = 1 << 30     # 1 GiB of text, compressed or not: more is not a log to parse in memory
SANITIZER_PREFIX = "========="


def read_log(path: Path, limit: int = MAX_LOG_BYTES) -> str:
    """The log's text (a .gz decompressed as a stream, never past ``limit``); DataError
    for a truncated or corrupt .gz, or a file over the limit."""
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        stream = gzip.GzipFile(fileobj=fh) if gzipped else fh
        try:
            raw = stream.read(limit + 1)
        except EOFError:
            raise DataError(f"{path}: the .gz is truncated (the compressed stream ends early)") from None
        except (OSError, zlib.error) as exc:
            raise DataError(f"{path}: not a readable .gz: {exc}") from None
    if len(raw) > limit:
        raise DataError(f"{path}: more than {limit} bytes of log text; split it or give the relevant part")
    return raw.decode("utf-8", errors="replace")


def analyze_log(path: Path, *, tool: str | None, fmt: str) -> str:
    text = read_log(path)
    report = parse_sanitizer(text, tool=tool)
    cases = parse_backend_ops(text)
    if SANITIZER_PREFIX not in text and not cases.cases:
        binary = "\x00" in text or text.count("\ufffd") > len(text) // 100
        raise DataError(f"{path}: not a compute-sanitizer log (no '{SANITIZER_PREFIX}' line and no test case"
                        + ("; the file is binary)" if binary else ")"))
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
