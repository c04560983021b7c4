"""Splitting one process's interleaved test-backend-ops + compute-sanitizer output into cases.

Recorded: `tests/fixtures/device/h200x2-ggml-session3/batch-through-a-file.log.gz`, 32 D2
cases (hsk=256, nh=4, nr23=[4,1], kv=512) in one synccheck process on an H200, ggml
d99724f2, `--destroy-on-device-error kernel --print-limit 0 --show-backtrace no`, stdout
redirected to a file (device-x2-call6.log). The per-case truth for the same cases is the
recorded one-process-per-case scan of session 2 (scan-…-249b.run.json.gz).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvdiag.parse.case_segments import segment_text, split_cases
from kvdiag.parse.text import strip_ansi

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
THROUGH_A_FILE = DEVICE / "h200x2-ggml-session3" / "batch-through-a-file.log.gz"
PER_CASE_SCAN = DEVICE / "h200x2-ggml-llama-session2" / "scan-20261129-175539-scan-D2-249b.run.json.gz"
M = "========="


@pytest.fixture(scope="module")
def recorded():
    text = strip_ansi(gzip.open(THROUGH_A_FILE, "rt", errors="replace").read())
    truth = json.load(gzip.open(PER_CASE_SCAN))["scan"]["cases"]
    return text, split_cases(text, "synccheck"), truth


def test_every_case_of_the_recorded_batch_gets_a_segment_and_every_error_is_accounted_for(recorded):
    _, split, _ = recorded
    assert len(split.segments) == 32
    assert split.problems() == ()
    assert split.sanitizer.error_count == 3084
    # 12 overflowing launches: 256 printed records and one overflow warning each
    counts = [s.error_count for s in split.segments if s.error_count]
    assert counts == [257] * 12
    assert sum(len(s.findings) for s in split.segments) == 3072
    assert not split.trailing_findings and split.trailing_overflow == 0


def test_through_a_file_the_findings_sit_one_case_early(recorded):
    """Why a batch runs on a terminal: current ggml prints a case's line after the case ran,
    and through a file its status waits in stdio's buffer while the NEXT case's findings are
    printed. Read by the rule, every finding lands one case too early; the truth is the
    per-case scan."""
    _, split, truth = recorded
    segments = split.segments
    said = [bool(s.findings) for s in segments]
    true = [truth[s.case.params]["verdict"] == "confirmed" for s in segments]
    assert said != true
    assert said[:-1] == true[1:] and not true[0]


def test_a_segment_is_the_lines_between_two_statuses(recorded):
    text, split, _ = recorded
    first, second = split.segments[:2]
    assert first.start_line == 1 and first.end_line == second.start_line - 1
    own = segment_text(text, second)
    assert own.rstrip("\n").endswith("OK")
    assert own.count("Barrier error detected") == len(second.findings) == 256


# ------------------------------------------------------------------ shaped as on a terminal

def case_line(params: str, status: str = "OK") -> str:
    return f"  FLASH_ATTN_EXT({params}): {status}"


def record(block: int) -> list[str]:
    return [f"{M} Barrier error detected. Divergent thread(s) in block.",
            f"{M}     at void flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, (bool)0, "
            "(bool)0, (bool)0, (bool)1>(const float2 *)+0x1b480 in fattn-mma-f16.cuh:1538",
            f"{M}     by thread (0,0,0) in block ({block},0,0)", f"{M} "]


HEAD = [f"{M} COMPUTE-SANITIZER", "Testing 2 devices", "", "Backend 1/2: CUDA0"]
TAIL = ["  3/3 tests passed", "  Backend CUDA0: OK", "Backend 2/2: CPU", "  Skipping", "2/2 backends passed", "OK"]


def test_on_a_terminal_the_findings_before_a_status_are_that_case_s():
    text = "\n".join(HEAD + [case_line("a=1")] + record(1) + record(2) + [case_line("a=2"), case_line("a=3")]
                     + TAIL + [f"{M} ERROR SUMMARY: 2 errors"]) + "\n"
    split = split_cases(text, "synccheck")
    assert [(s.case.params, len(s.findings)) for s in split.segments] == [("a=1", 0), ("a=2", 2), ("a=3", 0)]
    assert split.problems() == ()
    assert split.segment("a=2").findings[0].file == "fattn-mma-f16.cuh"


def test_older_builds_print_the_case_first_and_the_findings_mid_line():
    """`  OP(params): ` before the run: the findings continue its line, the status follows them."""
    rec = record(7)
    text = "\n".join(HEAD + [case_line("a=1"), case_line("a=2", "") + rec[0]] + rec[1:] + ["OK", case_line("a=3")]
                     + TAIL + [f"{M} ERROR SUMMARY: 1 error"]) + "\n"
    split = split_cases(text, "synccheck")
    assert [(s.case.params, len(s.findings)) for s in split.segments] == [("a=1", 0), ("a=2", 1), ("a=3", 0)]
    assert split.problems() == ()


@pytest.mark.parametrize("lines, problem", [
    (HEAD + [case_line("a=1")] + record(1) + TAIL + [f"{M} ERROR SUMMARY: 1 error"],
     "1 error(s) printed after the last case's status"),
    (HEAD + record(1) + [case_line("a=1")] + TAIL + [f"{M} ERROR SUMMARY: 5 errors"],
     "the tool counted 5 error(s), the cases' output holds 1"),
    (HEAD + record(1) + [case_line("a=1")] + TAIL,
     "compute-sanitizer did not finish its report (no summary line)"),
    (HEAD + record(1) + [case_line("a=1")] + TAIL + [f"{M} ERROR SUMMARY: 9 errors",
                                                      f"{M} ERROR SUMMARY: 8 errors were not printed. Use "
                                                      "--print-limit option to adjust the number of printed errors"],
     "8 error(s) were counted but not printed (print limit)"),
])
def test_what_cannot_be_attributed_is_said(lines, problem):
    split = split_cases("\n".join(lines) + "\n", "synccheck")
    assert any(p.startswith(problem) for p in split.problems()), split.problems()


def test_a_case_without_a_status_gets_no_segment():
    text = "\n".join(HEAD + [case_line("a=1"), case_line("a=2", "")]) + "\n"
    split = split_cases(text, "synccheck")
    assert [s.case.params for s in split.segments] == ["a=1"]
    assert split.segment("a=2") is None


def test_a_bare_run_is_split_by_its_statuses_alone():
    text = "\n".join(HEAD + [case_line("a=1"), case_line("a=2", "FAIL")] + TAIL) + "\n"
    split = split_cases(text, None)
    assert [(s.case.params, s.case.status) for s in split.segments] == [("a=1", "OK"), ("a=2", "FAIL")]
    assert split.sanitizer is None and split.problems() == ()
