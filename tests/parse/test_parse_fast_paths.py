"""The parsers' shortcuts for big, clean sanitizer output give what the line-by-line path gives.

A sanitized scan batch prints up to thousands of barrier records; the parsers skip work for the
lines that make up most of it (already clean text, the sanitizer's continuation lines, the
sanitizer's own lines in test-backend-ops' reader). These tests hold each shortcut to the slow
path's result on recorded real output.
"""

from __future__ import annotations

import random
from pathlib import Path

from kvdiag.engine.verdict.planning import escape_params
from kvdiag.parse.backend_ops import BackendOpsReader, parse_backend_ops
from kvdiag.parse.sanitizer import parse_sanitizer
from kvdiag.parse.text import clean_line, iter_lines, strip_ansi

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
SWEEP = TRANSCRIPTS / "synccheck-hsk256-sweep.log"


def _slow_lines(text: str) -> list[str]:
    return [clean_line(line) for line in text.split("\n")]


def test_iter_lines_on_clean_text_is_clean_line_on_each_line():
    raw = SWEEP.read_text(errors="replace")
    clean = strip_ansi(raw).replace("\r", "")
    assert "\x1b" in raw and "\x1b" not in clean
    assert list(iter_lines(clean)) == _slow_lines(clean)
    assert list(iter_lines(raw)) == _slow_lines(raw)
    assert list(iter_lines("a\r\nb\rc\n\x1b[1;32mOK\x1b[0m")) == ["a", "c", "OK"]
    assert list(iter_lines("a\nb\n")) == ["a", "b", ""]


def test_the_sanitizer_report_is_the_same_read_line_by_line():
    text = strip_ansi(SWEEP.read_text(errors="replace"))
    fast = parse_sanitizer(text, tool="synccheck")
    slow = parse_sanitizer("\n".join(_slow_lines(text)), tool="synccheck")
    assert fast.findings and fast == slow
    assert {f.kind for f in fast.findings} == {"barrier-divergence"}
    assert all(f.thread is not None and f.block is not None and f.line for f in fast.findings)


def test_test_backend_ops_reader_skips_sanitizer_lines_the_same_way():
    text = SWEEP.read_text(errors="replace")
    reader = BackendOpsReader()
    for line in text.split("\n"):
        reader.feed(line)
    assert parse_backend_ops(text) == reader.result()
    assert len(reader.result().cases) >= 12


def test_escape_params_escapes_exactly_the_regex_specials():
    specials = set(r"\^$.|?*+()[]{}")
    rng = random.Random(25)
    alphabet = "".join(sorted(specials)) + "hsk=,01 ab_-"
    for _ in range(500):
        params = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert escape_params(params) == "".join("\\" + c if c in specials else c for c in params)
