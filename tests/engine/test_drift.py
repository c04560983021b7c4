"""`accumulate` and `judge_drift` on the recorded drift runs and on synthetic FAIL logs.

The three recorded runs (tests/fixtures/device/h200-ggml-d99724f2) are
`-o FLASH_ATTN_EXT -p 'hsk=64,.*type_K=(q|iq)'` on the H200 with the D2 fix and the
print-every-case-error probe: every case prints its ERR (`<= threshold`) before its name.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from engine_helpers import D2_CASE, make_build
from kvdiag.engine.drift.measure import CaseDrift, DriftResult, accumulate, case_error, judge_drift, run_drift
from kvdiag.report.drift_text import render_drift
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunDir

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "fixtures" / "device" / "h200-ggml-d99724f2"
DRIFT_LOGS = [DEVICE / f"drift-print-every-case-error-{i}.stdout.log.gz" for i in (1, 2, 3)]
RECORDED_PARAMS = "hsk=64,.*type_K=(q|iq)"

Q2 = ("hsk=64,hsv=64,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
      "prec=f32,type_K=q2_0s,type_V=q2_0s,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
Q2_OTHER = Q2.replace("kv=512", "kv=1024")
HEADER = ("Testing 2 devices\n\nBackend 1/2: CUDA0\n  Device description: NVIDIA H200\n"
          "  Device memory: 143155 MB (142629 MB free)\n\n")
OK = "\x1b[1;32mOK\x1b[0m"
FAIL = "\x1b[1;31mFAIL\x1b[0m"


def footer(passed: int, total: int) -> str:
    status = OK if passed == total else FAIL
    return (f"  {passed}/{total} tests passed\n  Backend CUDA0: {status}\nBackend 2/2: CPU\n  Skipping\n"
            f"{2 if passed == total else 1}/2 backends passed\n{status}\n")


def failing_line(params: str, err: float) -> str:
    """Current ggml: the failing node's ERR comes BEFORE the case name, on the same line."""
    return f"[FLASH_ATTN_EXT] ERR = {err:.9f} > 0.005000000   FLASH_ATTN_EXT({params}): {FAIL}\n"


def passing_line(params: str) -> str:
    """Upstream prints no error for a passing case (no print-every-case-error probe)."""
    return f"  FLASH_ATTN_EXT({params}): {OK}\n"


@pytest.fixture(scope="module")
def recorded() -> tuple[DriftResult, list[dict]]:
    result = DriftResult(op="FLASH_ATTN_EXT", params=RECORDED_PARAMS, runs=3, seeded=False)
    counts = []
    for log in DRIFT_LOGS:
        with gzip.open(log, "rt", encoding="utf-8") as fh:
            counts.append(accumulate(result, fh.read()))
    return result, counts


@pytest.fixture(scope="module")
def d8_criterion():
    return load_registry(REPO / "registry").get("D8").drift


def type_k(case: CaseDrift) -> str:
    return re.search(r"type_K=([^,]+)", case.case).group(1)


def worst_margin(result: DriftResult, ktype: str) -> CaseDrift:
    return min((c for c in result.cases.values() if type_k(c) == ktype), key=lambda c: c.margin)


# ------------------------------------------------------------------ the recorded runs

def test_recorded_runs_fold_into_461_cases_of_3_runs(recorded):
    result, counts = recorded
    assert counts == [{"executed": 461, "failed": 0, "finished": True}] * 3
    assert result.matched == 461
    assert {c.runs for c in result.cases.values()} == {3}
    assert sum(c.fails for c in result.cases.values()) == 0
    # every case printed its own error each run (the probe), not the [NONE] views beside it
    assert {len(c.errors) for c in result.cases.values()} == {3}
    assert {c.threshold for c in result.cases.values()} == {0.0005}
    assert all(key == c.case and key.startswith("FLASH_ATTN_EXT(hsk=64,") for key, c in result.cases.items())


def test_recorded_runs_hold_q4_0_and_q8_0_cases_only(recorded):
    result, _ = recorded
    by_type: dict[str, int] = {}
    for c in result.cases.values():
        by_type[type_k(c)] = by_type.get(type_k(c), 0) + 1
    # the other quantized types (q4_1, q5_0, q5_1, iq4_nl, ...) are not supported on CUDA0
    assert by_type == {"q4_0": 228, "q8_0": 233}


def test_not_supported_cases_are_not_counted(recorded):
    with gzip.open(DRIFT_LOGS[0], "rt", encoding="utf-8") as fh:
        report = parse_backend_ops(fh.read())
    assert report.not_supported == 900 and report.executed == 461 and report.finished
    result, _ = recorded
    assert not any("type_K=q5_1" in c for c in result.cases)


def test_worst_margins(recorded):
    result, _ = recorded
    q4, q8 = worst_margin(result, "q4_0"), worst_margin(result, "q8_0")
    assert round(q4.margin * 100, 3) == 97.803
    assert round(q8.margin * 100, 3) == 99.471
    assert max(q4.errors) == pytest.approx(1.0986e-05)
    assert max(q8.errors) == pytest.approx(2.643e-06)
    assert q4.to_dict()["margin"] == 0.978 and q4.to_dict()["fails"] == 0
    # every case stays at least 97 % below its threshold
    assert min(c.margin for c in result.cases.values()) == q4.margin


def test_recorded_runs_are_not_reproduced_without_a_criterion(recorded):
    result, _ = recorded
    assert judge_drift(result, None) == ("not-reproduced", "461 case(s) executed 3 time(s) each, no failure")


def test_recorded_runs_are_not_reproduced_under_d8s_criterion(recorded, d8_criterion):
    result, _ = recorded
    assert judge_drift(result, d8_criterion)[0] == "not-reproduced"


def test_the_table_shows_every_margin(recorded, tmp_path):
    result, _ = recorded
    text = render_drift(result, "not-reproduced", "r", tmp_path, seeded_note="no --seed")
    assert "97.8%" in text and "99.5%" in text
    assert "printed no error value" not in text


def test_case_error_takes_the_ops_own_node_not_the_views():
    line = ("[FLASH_ATTN_EXT] ERR = 0.000001754 <= 0.000500000 [NONE] ERR = 0.300000000 <= 0.500000000   "
            f"FLASH_ATTN_EXT({Q2}): {OK}\n")
    (c,) = parse_backend_ops(HEADER + line).cases
    assert case_error(c) == (0.000001754, 0.0005)


# ------------------------------------------------------------------ synthetic FAIL runs, D8's criterion

def synthetic_runs(*runs: list[str]) -> DriftResult:
    result = DriftResult(op="FLASH_ATTN_EXT", params="hsk=64,.*type_K=q2_0s", runs=len(runs), seeded=True)
    for lines in runs:
        passed = sum(1 for line in lines if line.rstrip().endswith(OK))
        accumulate(result, HEADER + "".join(lines) + footer(passed, len(lines)))
    return result


def test_a_failing_case_over_the_criterion_is_confirmed(d8_criterion):
    assert d8_criterion.confirm_min_fails == 1 and d8_criterion.confirm_min_err == 1.0
    result = synthetic_runs(
        [failing_line(Q2, 1.712345678), passing_line(Q2_OTHER)],
        [passing_line(Q2), passing_line(Q2_OTHER)],
        [failing_line(Q2, 1.690000000), passing_line(Q2_OTHER)],
    )
    q2 = result.cases[f"FLASH_ATTN_EXT({Q2})"]
    assert (q2.runs, q2.fails, q2.errors, q2.threshold) == (3, 2, [1.712345678, 1.69], 0.005)
    assert q2.margin == pytest.approx((0.005 - 1.712345678) / 0.005)
    other = result.cases[f"FLASH_ATTN_EXT({Q2_OTHER})"]
    assert (other.runs, other.fails, other.errors, other.margin) == (3, 0, [], None)
    verdict, reason = judge_drift(result, d8_criterion)
    assert verdict == "confirmed"
    assert reason == f"FLASH_ATTN_EXT({Q2}) failed 2/3 runs, max ERR 1.71235 > threshold 0.005"


def test_a_failure_below_the_criterion_is_inconclusive(d8_criterion):
    result = synthetic_runs([failing_line(Q2, 0.02)], [passing_line(Q2)], [passing_line(Q2)])
    assert judge_drift(result, d8_criterion) == (
        "inconclusive", "1 case(s) failed at least once, below the entry's confirm criterion")
    # without a criterion a failure is not a confirmation either
    assert judge_drift(result, None)[0] == "inconclusive"


def test_zero_matching_cases_of_an_entry_is_judged_by_its_range(d8_criterion):
    """`kvdiag drift D8`: nothing matched is not-applicable only where the range says D8 cannot be."""
    from kvdiag.engine.drift.session import _absent
    from kvdiag.records.ranges import RangeEvidence

    d8 = load_registry(Path(__file__).resolve().parents[2] / "registry").get("D8")
    empty = synthetic_runs([], [], [])
    upstream = RangeEvidence("unaffected", "this tree is llama.cpp; the entry records the defect only in BeeLlama fork")
    verdict, reason = judge_drift(empty, d8_criterion, _absent(d8, "FLASH_ATTN_EXT", d8_criterion.params, upstream))
    assert verdict == "not-applicable" and reason.endswith("; outside the range (this tree is llama.cpp; the entry "
                                                           "records the defect only in BeeLlama fork)")
    fork = RangeEvidence("affected", "introduced c9e746733 is an ancestor of 775450a68, no fix recorded")
    verdict, reason = judge_drift(empty, d8_criterion, _absent(d8, "FLASH_ATTN_EXT", d8_criterion.params, fork))
    assert verdict == "inconclusive" and reason.startswith("present by range, not exercised by this build's tests")


def test_zero_matching_cases_without_an_entry_is_not_applicable(d8_criterion):
    empty = synthetic_runs([], [], [])
    expected = ("not-applicable", "no FLASH_ATTN_EXT case matches /hsk=64,.*type_K=q2_0s/ in this build (0 cases)")
    assert empty.matched == 0
    assert judge_drift(empty, d8_criterion) == expected
    assert judge_drift(empty, None) == expected
    # cases that exist but are not supported did not execute: still nothing matched
    unsupported = synthetic_runs([f"  FLASH_ATTN_EXT({Q2}): not supported [CUDA0] \n"])
    assert unsupported.matched == 0 and judge_drift(unsupported, d8_criterion)[0] == "not-applicable"


# ------------------------------------------------------------------ whole processes (scenario builds)

def drift_on(tmp_path: Path, scenario: str, runs: int) -> DriftResult:
    build = make_build(tmp_path / scenario, scenario)
    return run_drift(build / "bin" / "test-backend-ops", RunDir(tmp_path / f"run-{scenario}"),
                     op="FLASH_ATTN_EXT", params="hsk=256", runs=runs)


def test_run_drift_of_processes_that_abort_is_inconclusive_not_not_applicable(isolated, tmp_path, d8_criterion):
    """Each run dies (SIGABRT) in its first case: nothing executed, but that is a crash to show,
    not "no case matches"."""
    result = drift_on(tmp_path, "backend_ops_other_abort", 2)
    assert [(r["exit"], r["executed"], r["finished"]) for r in result.run_results] == [
        ("killed by SIGABRT (6)", 0, False)] * 2
    expected = ("inconclusive", "2 of 2 run(s) did not finish (run 1: killed by SIGABRT (6)); 0 case(s) executed")
    assert judge_drift(result, None) == expected
    assert judge_drift(result, d8_criterion) == expected


def test_a_run_cut_short_makes_clean_runs_inconclusive():
    result = DriftResult(op="FLASH_ATTN_EXT", params="hsk=64", runs=2, seeded=False)
    whole = HEADER + passing_line(Q2) + passing_line(Q2_OTHER) + footer(2, 2)
    cut = HEADER + passing_line(Q2) + f"  FLASH_ATTN_EXT({Q2_OTHER}): "
    for i, (text, exit_) in enumerate([(whole, "exit 0"), (cut, "timed out after 300.0 s (process group killed)")]):
        result.run_results.append({"index": i + 1, "exit": exit_, **accumulate(result, text)})
    assert result.cases[f"FLASH_ATTN_EXT({Q2_OTHER})"].runs == 1
    assert judge_drift(result, None) == (
        "inconclusive", "1 of 2 run(s) did not finish (run 2: timed out after 300.0 s (process group killed)); "
                        "2 case(s) executed")


def test_run_drift_of_a_failing_case_is_confirmed_under_d8s_criterion(isolated, tmp_path, d8_criterion):
    result = drift_on(tmp_path, "backend_ops_case_fail", 3)
    assert [(r["exit"], r["executed"], r["failed"], r["finished"]) for r in result.run_results] == [
        ("exit 1", 1, 1, True)] * 3
    (case,) = result.cases.values()
    assert (case.case, case.runs, case.fails, case.errors) == (f"FLASH_ATTN_EXT({D2_CASE})", 3, 3, [1.712345678] * 3)
    assert judge_drift(result, d8_criterion) == (
        "confirmed", f"FLASH_ATTN_EXT({D2_CASE}) failed 3/3 runs, max ERR 1.71235 > threshold 0.005")


def test_run_drift_of_healthy_and_empty_builds(isolated, tmp_path):
    ok = drift_on(tmp_path, "backend_ops_all_ok", 2)
    assert judge_drift(ok, None) == ("not-reproduced", "1 case(s) executed 2 time(s) each, no failure")
    empty = drift_on(tmp_path, "backend_ops_no_cases", 2)
    assert [r["finished"] for r in empty.run_results] == [True, True]
    assert judge_drift(empty, None)[0] == "not-applicable"
