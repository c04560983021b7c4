"""A real scan as `kvdiag scan --save` wrote it on an H200, rendered the ways a saved scan is shown.

tests/fixtures/device/h200-session5/scan-D2-hsk-upstream-749f688fc.json.gz: `kvdiag scan D2
--build <upstream> --params hsk --save …` on upstream llama.cpp 749f688fc (b10547), one H200,
the launch probe's program (2932 cases: 1330 affected, 701 unaffected, 901 that launched no
flash_attn_ext_f16 kernel). That run saved the scan, then ended with exit 70, `internal failure
(UndefinedError: 'dict object' has no attribute 'why')`: its program record had no ``why`` when
the probe's program ran, and the text template is strict. Machine paths in the file are
replaced: ``$KVDIAG_HOME``, ``<upstream>``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvdiag.records.scan_program import ScanProgram
from kvdiag.report.scan_text import render_scan_data

SCAN = (Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-session5"
        / "scan-D2-hsk-upstream-749f688fc.json.gz")


@pytest.fixture(scope="module")
def saved() -> dict:
    return json.loads(gzip.open(SCAN, "rt", encoding="utf-8").read())


def test_the_recorded_scan_lacks_why_as_the_h200_wrote_it(saved):
    """The fixture is what failed: kept as written, so the reader's tolerance stays tested."""
    assert "why" not in saved["program"] and saved["program"]["path"] == "launch"


def test_the_recorded_h200_scan_renders_as_text(saved):
    text = render_scan_data(saved, "run: $KVDIAG_HOME/runs/20261202-103307.964930-0001-scan-D2")
    lines = text.splitlines()
    assert lines[0].startswith("D2 scan of FLASH_ATTN_EXT /hsk/: 2932 supported case(s), ")
    assert "affected: 1330   unaffected: 701   inconclusive: 0   other: 901" in lines
    assert "program: launch ($KVDIAG_HOME/probe-programs/4b5fc69048cd1f9ef3f78d2a/test-backend-ops, reused)" in lines
    assert "case space: --params" in lines
    assert any(ln.startswith("  affected  ") and "flash_attn_ext_f16<" in ln for ln in lines)
    assert lines[-1] == "run: $KVDIAG_HOME/runs/20261202-103307.964930-0001-scan-D2"


def test_a_plain_program_record_says_why_and_a_missing_one_renders_nothing(saved):
    plain = {**saved, "program": ScanProgram("plain", "not a ninja build").to_dict()}
    assert "program: plain (not a ninja build)" in render_scan_data(plain, "x").splitlines()
    without = {k: v for k, v in saved.items() if k != "program"}
    assert not any(ln.startswith("program:") for ln in render_scan_data(without, "x").splitlines())


def test_the_program_record_reads_back_what_it_writes(saved):
    read = ScanProgram.from_dict(saved["program"])
    assert (read.path, read.why, read.probe.reused, read.probe.probe) == ("launch", None, True,
                                                                          "test-backend-ops-launch")
    assert ScanProgram.from_dict(read.to_dict()) == read
    assert ScanProgram.from_dict(None) is None and ScanProgram.from_dict("launch") is None
