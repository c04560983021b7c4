"""Judging a control from recorded sanitizer logs (fixtures in compute-sanitizer's format)."""

from __future__ import annotations

import pytest

from controls_helpers import fixture_log, ok_launcher
from kvdiag.controls.canaries import ALL_TOOLS, pair_for
from kvdiag.controls.judging import judge_negative, judge_positive


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_positive_detected_at_the_expected_line(tool):
    c = pair_for(tool).positive
    detected, detail = judge_positive(c, fixture_log(f"{tool}-positive-detected.log", tool))
    assert detected, detail
    assert detail.startswith(f"{c.expected_kind} at {c.name}.cu:{c.expected_line()}, ")


def test_positive_detail_carries_the_tools_count():
    _, detail = judge_positive(pair_for("synccheck").positive,
                               fixture_log("synccheck-positive-detected.log", "synccheck"))
    assert detail.endswith(", 32 errors")        # the summary's count, not the 3 printed
    _, detail = judge_positive(pair_for("racecheck").positive,
                               fixture_log("racecheck-positive-detected.log", "racecheck"))
    assert "1 hazard (1 error, 0 warnings)" in detail


def test_race_whose_marked_line_is_the_second_access_is_detected():
    detected, detail = judge_positive(pair_for("racecheck").positive,
                                      fixture_log("racecheck-positive-peer-only.log", "racecheck"))
    assert detected, detail


def test_positive_at_the_wrong_line_fails():
    c = pair_for("synccheck").positive
    detected, detail = judge_positive(c, fixture_log("synccheck-positive-wrong-line.log", "synccheck"))
    assert not detected
    line = c.expected_line()
    assert f"expected barrier-divergence at barrier_divergent.cu:{line}" in detail
    assert f"2 x barrier-divergence at barrier_divergent.cu:{line + 3}" in detail
    assert "96 errors" in detail


def test_positive_of_the_wrong_kind_fails():
    # memcheck's finding at the right line, judged as if it were the initcheck canary's.
    log = fixture_log("memcheck-positive-detected.log", "memcheck").replace("oob_write", "uninit_read")
    detected, detail = judge_positive(pair_for("initcheck").positive, log)
    assert not detected and "invalid-write" in detail


def test_positive_in_another_file_fails():
    log = fixture_log("memcheck-positive-detected.log", "memcheck").replace("in oob_write.cu", "in other.cu")
    detected, _ = judge_positive(pair_for("memcheck").positive, log)
    assert not detected


def test_positive_matches_a_full_path_by_basename():
    log = fixture_log("memcheck-positive-detected.log", "memcheck").replace(
        "in oob_write.cu", "in /somewhere/repro/canaries/oob_write.cu")
    detected, _ = judge_positive(pair_for("memcheck").positive, log)
    assert detected


def test_silent_positive_fails_with_the_tools_own_zero():
    detected, detail = judge_positive(pair_for("memcheck").positive,
                                      fixture_log("memcheck-negative-clean.log", "memcheck"))
    assert not detected
    assert detail.endswith("the tool reported 0 errors")


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_negative_clean(tool):
    c = pair_for(tool).negative
    clean, detail = judge_negative(c, fixture_log(f"{tool}-negative-clean.log", tool), ok_launcher(c.name))
    assert clean, detail
    assert "launcher cupy" in detail


def test_negative_dirty_fails():
    c = pair_for("memcheck").negative
    clean, detail = judge_negative(c, fixture_log("memcheck-negative-dirty.log", "memcheck"), ok_launcher(c.name))
    assert not clean
    assert detail == "1 error on the fixed twin: 1 x invalid-write at oob_write_fixed.cu:12"


def test_negative_racecheck_with_hazards_fails():
    c = pair_for("racecheck").negative
    clean, detail = judge_negative(c, fixture_log("racecheck-positive-detected.log", "racecheck"),
                                   ok_launcher(c.name))
    assert not clean and "1 hazard" in detail


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_tool_that_refuses_to_run_neither_detects_nor_is_clean(tool):
    """It prints 'ERROR SUMMARY: 0 errors' after refusing the device: that zero proves nothing."""
    log = fixture_log("tool-refused-device.log", tool)
    detected, pos_detail = judge_positive(pair_for(tool).positive, log)
    clean, neg_detail = judge_negative(pair_for(tool).negative, log, ok_launcher(pair_for(tool).negative.name))
    assert not detected and not clean
    assert "compute-sanitizer failed: Error: Device not supported" in pos_detail
    assert neg_detail.startswith("compute-sanitizer failed: Error: Device not supported")


def test_log_without_summary_is_neither():
    log = fixture_log("tool-no-summary.log", "synccheck")
    detected, _ = judge_positive(pair_for("synccheck").positive, log, run_note="timed out after 120.0 s")
    clean, detail = judge_negative(pair_for("synccheck").negative, log, None, run_note="timed out after 120.0 s")
    assert not detected and not clean
    assert "timed out after 120.0 s" in detail


@pytest.mark.parametrize("log", [None, ""])
def test_no_output_at_all_is_neither(log):
    assert judge_positive(pair_for("memcheck").positive, log, run_note="exit 127")[0] is False
    clean, detail = judge_negative(pair_for("memcheck").negative, log, None, run_note="exit 127")
    assert not clean and "exit 127" in detail


def test_clean_negative_whose_kernel_never_ran_is_not_clean():
    """No launcher (exit 3) means no kernel: every tool is silent about a kernel that never ran."""
    c = pair_for("initcheck").negative
    log = fixture_log("initcheck-negative-clean.log", "initcheck")
    clean, detail = judge_negative(c, log, None)
    assert not clean and "nothing proves the kernel ran" in detail
    clean, detail = judge_negative(c, log, {"launcher": None, "kernel": c.name, "ok": False,
                                            "error": "no launcher: pycuda: ...; cupy: ..."})
    assert not clean and "did not run to completion: no launcher" in detail


def test_real_transcript_is_not_mistaken_for_a_canary():
    """The recorded D2 log names fattn-mma-f16.cuh: a barrier error, but not the canary's."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "synccheck-single-case.log").read_text()
    detected, detail = judge_positive(pair_for("synccheck").positive, text)
    assert not detected and "fattn-mma-f16.cuh:1538" in detail
