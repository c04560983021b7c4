"""`kvdiag analyze` streams its log: the same output as the whole-text parsers, on every recorded log.

The reference is the path analyze took before it streamed: the whole text decoded,
``parse_sanitizer`` and ``parse_backend_ops`` over it, the same rendering. Every log
recorded under tests/fixtures (real compute-sanitizer and test-backend-ops output, and
the hand-made fixtures of the parsers) is analyzed both ways, as text and as JSON,
with the tool detected and with each tool named.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.errors import DataError
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.sanitizer import MARKER, instantiations, parse_sanitizer
from kvdiag.report.analysis import analyze_log, render_analysis

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = sorted(p for p in FIXTURES.rglob("*") if p.name.endswith((".log", ".log.gz")))


def _raw(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _whole_text(path: Path, tool: str | None, fmt: str) -> str | None:
    text = _raw(path).decode("utf-8", errors="replace")
    report, cases = parse_sanitizer(text, tool=tool), parse_backend_ops(text)
    if MARKER not in text and not cases.cases:
        return None
    return render_analysis(path, report, cases, instantiations(report), fmt)


def test_there_are_recorded_logs_to_compare():
    assert len(LOGS) >= 40 and any(p.name.endswith(".gz") for p in LOGS)
    assert any("sanitizer" in p.parts for p in LOGS) and any("transcripts" in p.parts for p in LOGS)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_streamed_analysis_equals_the_whole_text_one(path: Path, fmt: str):
    named = SANITIZER_TOOLS if MARKER.encode() in _raw(path) else ()   # a tool named only matters to its lines
    for tool in (None, *named):
        expected = _whole_text(path, tool, fmt)
        if expected is None:
            with pytest.raises(DataError, match="not a compute-sanitizer log"):
                analyze_log(path, tool=tool, fmt=fmt)
            continue
        assert analyze_log(path, tool=tool, fmt=fmt) == expected, (path, tool)


def test_a_line_split_across_chunks_and_a_character_split_across_them_read_the_same(tmp_path, monkeypatch):
    import kvdiag.report.analysis as analysis

    source = FIXTURES / "transcripts" / "synccheck-hsk256-sweep.log"
    log = tmp_path / "odd.log"
    log.write_bytes(source.read_bytes().replace(b"Divergent", "Diverg\u00e9nt \u2014".encode()) + b"\xff\xfe tail")
    expected = _whole_text(log, None, "json")
    for chunk in (1, 7, 4093):
        monkeypatch.setattr(analysis, "CHUNK_BYTES", chunk)
        assert analyze_log(log, tool=None, fmt="json") == expected, chunk


def test_more_text_than_the_limit_is_65_without_reading_it_all(tmp_path):
    log = tmp_path / "big.log.gz"
    log.write_bytes(gzip.compress(b"========= COMPUTE-SANITIZER\n" * 100_000))
    with pytest.raises(DataError, match="more than 1000000 bytes of log text"):
        analyze_log(log, tool=None, fmt="text", limit=1_000_000)
