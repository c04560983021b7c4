"""`kvdiag analyze LOG`: the parsers applied to a sanitizer log the user already has.

The log is streamed, never held: read in chunks (a .gz decompressed as it is read),
decoded incrementally, split into lines that the sanitizer digest and the
test-backend-ops reader take one at a time. Memory is bounded by what is printed (the
sites, the cases), not by the log: a 200 MB synccheck log took 1.5 GB read whole and
takes about 30 MB streamed (benchmarks/bench_analyze_memory.py, docs/performance.md).
The output is the one the whole-text parsers give (tests compare them on every
recorded log).
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kvdiag.errors import DataError
from kvdiag.parse.backend_ops import BackendOpsReader
from kvdiag.parse.sanitizer_digest import SanitizerDigester
from kvdiag.parse.text import LINE_LIMIT, cut_note
from kvdiag.report.templating import render

__all__ = ["MAX_LOG_BYTES", "analyze_log", "render_analysis"]

MAX_LOG_BYTES = 16 << 30    # 16 GiB of text, compressed or not: far past one sanitizer run's log
SANITIZER_PREFIX = "========="
CHUNK_BYTES = 1 << 20


@dataclass
class _TextStats:
    """What the "is this a log at all?" check needs, counted as the text goes by."""

    chars: int = 0
    replaced: int = 0
    nul: bool = False
    marker: bool = False
    lines_cut: int = 0          # lines longer than LINE_LIMIT, cut to it

    def see(self, piece: str) -> None:
        self.chars += len(piece)
        self.replaced += piece.count("\ufffd")
        self.nul = self.nul or "\x00" in piece

    def note_line(self, line: str, cut: bool) -> None:
        self.marker = self.marker or SANITIZER_PREFIX in line
        self.lines_cut += cut


def _lines(path: Path, stats: _TextStats, limit: int) -> Iterator[str]:
    """The log's lines as ``text.split("\\n")`` gives them, each cut to LINE_LIMIT (the cut counted in
    ``stats``), without ever holding the text or a line past the limit; DataError for a truncated or
    corrupt .gz, or more than ``limit`` bytes of text."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    total, carry, over = 0, "", False
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        stream = gzip.GzipFile(fileobj=fh) if gzipped else fh
        while True:
            try:
                chunk = stream.read(CHUNK_BYTES)
            except EOFError:
                raise DataError(f"{path}: the .gz is truncated (the compressed stream ends early)") from None
            except (OSError, zlib.error) as exc:
                raise DataError(f"{path}: not a readable .gz: {exc}") from None
            total += len(chunk)
            if total > limit:
                raise DataError(f"{path}: more than {limit} bytes of log text; split it or give the relevant part")
            text = decoder.decode(chunk, final=not chunk)
            stats.see(text)
            parts = text.split("\n")
            for part in parts[:-1]:
                line, cut = _joined(carry, over, part)
                stats.note_line(line, cut)
                yield line
                carry, over = "", False
            carry, over = _joined(carry, over, parts[-1])
            if not chunk:
                break
    stats.note_line(carry, over)
    yield carry


def _joined(carry: str, over: bool, part: str) -> tuple[str, bool]:
    """A line's text so far with ``part`` added, cut to LINE_LIMIT; True once it was cut."""
    if over:
        return carry, True
    joined = carry + part
    if len(joined) > LINE_LIMIT:
        return joined[:LINE_LIMIT], True
    return joined, False


def analyze_log(path: Path, *, tool: str | None, fmt: str, limit: int = MAX_LOG_BYTES) -> str:
    stats = _TextStats()
    digest = SanitizerDigester(tool=tool)
    cases = BackendOpsReader()
    for line in _lines(path, stats, limit):
        digest.feed(line)
        cases.feed(line)
    report, case_report = digest.result(), cases.result()
    if not stats.marker and not case_report.cases:
        binary = stats.nul or stats.replaced > stats.chars // 100
        raise DataError(f"{path}: not a compute-sanitizer log (no '{SANITIZER_PREFIX}' line and no test case"
                        + ("; the file is binary)" if binary else ")"))
    return render_analysis(path, report, case_report, report.instantiations, fmt, lines_cut=stats.lines_cut)


def render_analysis(path: Path, report: Any, cases: Any, insts: tuple[str, ...], fmt: str,
                    lines_cut: int = 0) -> str:
    """The analysis of a report (a SanitizerDigest, or a whole SanitizerReport: the same fields)."""
    if fmt == "json":
        data = {
            "file": str(path),
            "sanitizer": {
                "tool": report.tool, "error_count": report.error_count, "not_printed": report.not_printed,
                "printed": report.printed_count, "has_summary": report.has_summary,
                "tool_errors": list(report.tool_errors),
                "racecheck": report.racecheck.to_dict() if report.racecheck else None,
                "sites": [s.to_dict() for s in report.sites],
                "instantiations": list(insts),
            },
            "test_cases": {"matched": len(cases.cases), "executed": cases.executed, "failed": cases.failed,
                           "not_supported": cases.not_supported,
                           "running_case": cases.running_case.case_string if cases.running_case else None},
            "lines_cut": lines_cut, "line_limit": LINE_LIMIT,
        }
        return json.dumps(data, indent=2, default=str) + "\n"
    return render("analysis.txt.j2", path=path, r=report, cases=cases, insts=insts,
                  cut=cut_note(lines_cut, before="reading") if lines_cut else "")
