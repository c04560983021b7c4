"""test-backend-ops parser against recorded H200 output and hand-written fixtures."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import pytest

from kvdiag.parse.backend_ops import (
    BackendCase,
    BackendOpsCapabilities,
    BackendSummary,
    CaseMetric,
    detect_capabilities,
    params_dict,
    parse_backend_ops,
    parse_backend_ops_lines,
    parse_status,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
G, R, E = "\x1b[1;32m", "\x1b[1;31m", "\x1b[0m"

SINGLE_PARAMS = (
    "hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
    "prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0"
)


def read(*parts: str) -> str:
    path = FIXTURES.joinpath(*parts)
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as fh:
            return fh.read()
    return path.read_text()


def parse(*parts: str):
    return parse_backend_ops(read(*parts))


# -------------------------------------------------------------------- recorded


@pytest.fixture(scope="module")
def fa_all():
    return parse("transcripts", "test-backend-ops-fa-all-nosanitizer.log.gz")


def test_fa_all_counts(fa_all):
    assert fa_all.passed == 2936
    assert fa_all.not_supported == 2222
    assert fa_all.failed == 0
    assert fa_all.executed == 2936
    assert fa_all.count("INCOMPLETE") == 0 and fa_all.count("SKIPPED_LARGE") == 0
    assert len(fa_all.cases) == 5158
    assert {c.op for c in fa_all.cases} == {"FLASH_ATTN_EXT"}
    assert {c.backend for c in fa_all.cases} == {"CUDA0"}


def test_fa_all_summaries(fa_all):
    assert fa_all.device_count == 2
    assert fa_all.backend_names == ("CUDA0", "CPU")
    assert fa_all.backend("CUDA0") == BackendSummary(
        name="CUDA0", index=1, total=2, description="NVIDIA H200", memory_total_mb=143155,
        memory_free_mb=142629, tests_passed=2936, tests_total=2936, status="OK",
    )
    assert fa_all.backend("CPU").skipped == "Skipping"
    assert (fa_all.backends_passed, fa_all.backends_total, fa_all.overall_ok) == (2, 2, True)
    assert fa_all.finished is True and fa_all.running_case is None
    assert fa_all.failing_tests == () and fa_all.errors == ()


def test_fa_all_not_supported_note(fa_all):
    first_ns = next(c for c in fa_all.cases if c.status == "NOT_SUPPORTED")
    assert first_ns.notes == ("not supported [CUDA0]",)
    assert first_ns.params_dict()["type_K"] == "q5_1"
    first = fa_all.cases[0]
    assert first.line_no == 9
    assert first.case_string.startswith("FLASH_ATTN_EXT(hsk=64,hsv=64,nh=8,nr23=[4,1],kv=1024,nb=32,")


def test_sweep_case_status_arrives_late():
    """At d99724f2 the prefix is printed after the compute: the 12th case is OK.

    Its OK reaches the stream only when ggml_abort flushes stdout, after the
    sanitizer's and the CUDA error's lines; the case that died was never named.
    """
    report = parse("transcripts", "synccheck-hsk256-sweep.log")
    assert [c.status for c in report.cases] == ["OK"] * 12
    last = report.last_case
    assert last.line_no == 21
    assert last.notes == ("status printed late, on line 1304",)
    assert {k: last.params_dict()[k] for k in ("kv", "nb", "type_K")} == {"kv": "2048", "nb": "64", "type_K": "q4_0"}
    assert all(c.notes == () for c in report.cases[:11])
    assert report.running_case is None
    assert report.finished is False and report.overall_ok is None
    assert report.backend("CUDA0").tests_passed is None


def test_single_case_synccheck_prints_no_case():
    report = parse("transcripts", "synccheck-single-case.log")
    assert report.cases == ()
    assert report.running_case is None and report.last_case is None
    assert report.backend_names == ("CUDA0",)
    assert report.backend("CUDA0").memory_free_mb == 142509
    assert report.finished is False


@pytest.mark.parametrize("name", ["memcheck-single-case.log", "racecheck-single-case.log"])
def test_single_case_under_clean_sanitizer(name):
    report = parse("transcripts", name)
    (case,) = report.cases
    assert (case.op, case.params, case.status, case.backend) == ("FLASH_ATTN_EXT", SINGLE_PARAMS, "OK", "CUDA0")
    assert (report.backend("CUDA0").tests_passed, report.backend("CUDA0").tests_total) == (1, 1)
    assert report.overall_ok is True


# ---------------------------------------------------------------- hand-written


@pytest.fixture(scope="module")
def failing():
    return parse("backend_ops", "console-fail.log")


def test_fail_counts(failing):
    counts = {s: failing.count(s) for s in ("OK", "FAIL", "NOT_SUPPORTED", "SKIPPED_LARGE", "INCOMPLETE")}
    assert counts == {"OK": 2, "FAIL": 6, "NOT_SUPPORTED": 1, "SKIPPED_LARGE": 1, "INCOMPLETE": 0}
    assert failing.executed == 8
    assert failing.overall_ok is False
    assert (failing.backends_passed, failing.backends_total) == (1, 2)
    cuda = failing.backend("CUDA0")
    assert (cuda.tests_passed, cuda.tests_total, cuda.status) == (2, 8, "FAIL")
    assert failing.backend("CPU").skipped == "Skipping CPU backend"


def test_fail_metrics(failing):
    fa, sm = failing.cases[0], failing.cases[1]
    assert (fa.op, fa.status) == ("FLASH_ATTN_EXT", "FAIL")
    assert fa.metrics == (CaseMetric("ERR", 1.712345678, 0.005, "FLASH_ATTN_EXT"),)
    assert fa.metrics[0].ratio == pytest.approx(342.4691356)
    assert fa.notes == ()
    assert sm.metrics == (CaseMetric("NMSE", 0.000000103, 0.0000001, "SOFT_MAX"),)


def test_fail_notes(failing):
    notes = [c.notes for c in failing.cases[2:8]]
    assert notes == [
        ("[MUL_MAT] NaN at index 3 (CUDA0=nan CPU=1.000000)",),
        ("[ADD] inf mismatch: CUDA0=inf CPU=1.000000",),
        ("sentinel mismatch: sent_3",),
        ("compare failed",),
        ("not supported [CUDA0]",),
        (),
    ]
    assert failing.cases[7].status == "SKIPPED_LARGE"


def test_failing_tests_list(failing):
    assert len(failing.failing_tests) == 6
    assert failing.failing_tests == tuple(c.case_string for c in failing.failures())


def test_grad_mode_metrics():
    report = parse("backend_ops", "grad-maa-fail.log")
    maa, grad, ok = report.cases
    assert maa.metrics == (CaseMetric("MAA", 0.000123, 0.0001, "CROSS_ENTROPY_LOSS"),)
    assert grad.notes == ("[SUM] nonfinite gradient at index 0 (src0=nan)",)
    assert ok.status == "OK"
    assert (report.failed, report.passed) == (2, 1)


def test_support_mode():
    report = parse("backend_ops", "support-mode.log")
    assert [c.status for c in report.cases] == ["SUPPORTED", "NOT_SUPPORTED"]
    assert report.executed == 0
    assert report.overall_ok is True


def test_old_prefix_first_build_names_running_case():
    report = parse("backend_ops", "console-old-running.log")
    assert [c.status for c in report.cases] == ["OK", "INCOMPLETE"]
    running = report.running_case
    assert running is report.cases[-1]
    assert running.params == SINGLE_PARAMS
    assert running.notes == ("CUDA error: an illegal memory access was encountered",)
    assert running.line_no == 8
    assert report.finished is False


def test_pending_case_closed_by_next_case_is_not_running():
    text = "  ADD(type=f32): \n  ADD(type=f16): " + G + "OK" + E + "\n"
    report = parse_backend_ops(text)
    assert [(c.params, c.status, c.notes) for c in report.cases] == [
        ("type=f32", "INCOMPLETE", ("no status printed",)),
        ("type=f16", "OK", ()),
    ]
    assert report.running_case is None


def test_stray_ok_is_not_a_verdict():
    report = parse_backend_ops(G + "OK" + E + "\nsomething else OK\n")
    assert report.overall_ok is None and report.cases == ()


def test_unrelated_line_ending_in_ok_does_not_complete_a_case():
    report = parse_backend_ops("  ADD(type=f32): \nggml_cuda_init: all OK\n")
    assert report.running_case.status == "INCOMPLETE"


def test_stderr_errors_are_collected():
    text = (
        "Backend 1/1: CUDA0\n"
        "Error in allocation: out of memory\n"
        "failed to allocate tensors [CUDA0] \n"
        "  MUL_MAT(type_a=f16): failed to allocate tensors [CUDA0] " + R + "FAIL" + E + "\n"
    )
    report = parse_backend_ops(text)
    assert report.errors == ("Error in allocation: out of memory", "failed to allocate tensors [CUDA0]")
    (case,) = report.cases
    assert (case.status, case.notes, case.backend) == ("FAIL", ("failed to allocate tensors [CUDA0]",), "CUDA0")


def test_nan_metric_is_json_safe():
    status, metrics, notes = parse_status("[FLASH_ATTN_EXT] ERR = nan > 0.005000000 FAIL")
    assert status == "FAIL" and notes == ()
    assert math.isnan(metrics[0].value) and metrics[0].ratio is None
    assert json.loads(json.dumps(metrics[0].to_dict()))["value"] == "nan"


def test_unknown_diagnostics_are_kept():
    assert parse_status("weird words FAIL") == ("FAIL", (), ("weird words",))
    assert parse_status("") == (None, (), ())


def test_streamed_equals_whole():
    path = FIXTURES / "backend_ops" / "console-fail.log"
    with path.open() as fh:
        assert parse_backend_ops_lines(fh) == parse_backend_ops(path.read_text())


# ------------------------------------------------------------------- helpers


def test_params_dict_is_bracket_aware():
    assert params_dict("hsk=256,hsv=256,nr23=[4,1],permute=[0,1,2,3]") == {
        "hsk": "256", "hsv": "256", "nr23": "[4,1]", "permute": "[0,1,2,3]",
    }
    case = BackendCase(op="ADD", params="type=f32,ne=[10,5,4,3],flag", status="OK")
    assert params_dict(case) == {"type": "f32", "ne": "[10,5,4,3]", "flag": ""}
    assert params_dict("") == {}


def test_capabilities_upstream():
    caps = detect_capabilities(read("backend_ops", "help-upstream.txt"))
    assert caps == BackendOpsCapabilities(
        has_seed=False, has_test_file=True, has_parallel_jobs=True, modes=("test", "grad", "perf", "support"),
        has_list_ops=True, has_show_coverage=True, output_formats=("console", "sql", "csv"),
    )


def test_capabilities_fork_with_seed():
    caps = detect_capabilities(read("backend_ops", "help-fork-seed.txt"))
    assert caps.has_seed is True and caps.has_test_file is True and caps.has_parallel_jobs is True


def test_capabilities_old():
    caps = detect_capabilities(read("backend_ops", "help-old.txt"))
    assert (caps.has_seed, caps.has_test_file, caps.has_parallel_jobs, caps.has_list_ops) == (False,) * 4
    assert caps.modes == ("test", "grad", "perf")
    assert detect_capabilities("") == BackendOpsCapabilities()


# ---------------------------------------------------------------- robustness


@pytest.mark.parametrize("text", ["", "\n", "garbage\x00\xff\n(((\n  NOT A CASE\n", "  lower(case): OK\n"])
def test_garbage(text):
    report = parse_backend_ops(text)
    assert report.cases == () and report.backends == ()
    assert report.overall_ok is None and report.running_case is None
    json.dumps(report.to_dict())


def test_to_dict(failing):
    data = json.loads(json.dumps(failing.to_dict()))
    assert data["counts"]["FAIL"] == 6
    assert data["cases"][0]["case_string"].startswith("FLASH_ATTN_EXT(hsk=256")
    assert data["cases"][0]["metrics"][0] == {"name": "ERR", "value": 1.712345678, "threshold": 0.005, "op": "FLASH_ATTN_EXT"}
    assert data["finished"] is True and data["overall_ok"] is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        failing.cases[0].status = "OK"  # type: ignore[misc]
