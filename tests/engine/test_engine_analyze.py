"""`kvdiag analyze` on the recorded hsk=256 sweep (a log the user already has)."""

from __future__ import annotations

import json

from engine_helpers import TRANSCRIPTS
from kvdiag.cli import main

SWEEP = TRANSCRIPTS / "synccheck-hsk256-sweep.log"
TILE_A = ("flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)8, (int)1, (int)2, "
          "(bool)0, (bool)0, (bool)0, (bool)1>")
TILE_B = ("flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)8, (int)1, (int)2, "
          "(bool)0, (bool)0, (bool)1, (bool)0>")


def test_analyze_text(capsys):
    assert main(["analyze", str(SWEEP)]) == 0
    out = capsys.readouterr().out
    assert "synccheck, 256 error(s) reported" in out
    assert "barrier-divergence at fattn-mma-f16.cuh:1538" in out
    assert TILE_A in out and TILE_B in out


def test_analyze_json(capsys):
    assert main(["analyze", str(SWEEP), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    san = data["sanitizer"]
    assert san["tool"] == "synccheck" and san["error_count"] == 256 and san["has_summary"] is True
    assert [(s["file"], s["line"], s["count"]) for s in san["sites"]] == [("fattn-mma-f16.cuh", 1538, 128)] * 2
    kernels = {s["kernel"].split("(const")[0].removeprefix("void ") for s in san["sites"]}
    assert kernels == {TILE_A, TILE_B}


def test_analyze_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "none.log")]) == 64
    assert "no such log file" in capsys.readouterr().err
