"""Device session 24 on an H100 (tests/fixtures/device/h100-session24): D19 confirmed on ggml d99724f2
and its fix probe verified there; one cuBLAS-fed initcheck root explained in a single process; the whole
suite under memcheck and initcheck judged to the end.

Recorded on ggml d99724f2 built there: `kvdiag run D19`, `kvdiag verify D19 --probe D19-fix-bound-sink-read
--before latest --numeric-params …`, MUL_MAT_ID's `getrows.cu:127` case alone under initcheck in test mode
with cuBLAS's logs on and under Nsight Compute, and `kvdiag discover --tool memcheck,initcheck -j 16`.
Recorded logs are judged again with the engine.
"""

from __future__ import annotations

import json
import lzma
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvdiag.parse.sanitizer import parse_sanitizer, site_label
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz, recorded  # noqa: E402
from test_recorded_h100_session21 import judged_log, recorded_attempt, rejudge_unlisted  # noqa: E402
from sampled_load import busy_cores, gpu_samples  # noqa: E402

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
FIXTURE = DEVICE / "h100-session24"
REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RUNS = FIXTURE / "runs"
D19_RUN, D19_AFTER = "20261207-074224.591253-0002-D19", "20261207-074621.854043-0005-D19"
SINK_SITE = "fattn-mma-f16.cuh:1357"
SINK_KERNEL = "flash_attn_ext_f16<128, 128, 4, 8, false, false>"
WHOLE_LOGS = ["initcheck-00218", "initcheck-00372", "initcheck-00482", "initcheck-00486", "initcheck-00576",
              "initcheck-00692"]
MMID_CASE = "type_a=bf16,type_b=f32,n_mats=16,n_used=16,b=1,m=32,n=1024,k=16"
GEMM_OUTPUT_BYTES = 32 * 1024 * 4        # m × n floats: one expert's rows for all 1024 tokens


def document() -> dict:
    return json.loads(read_gz(FIXTURE / "whole.json.gz"))


def chain() -> dict[str, int]:
    """The script's time stamps: what happened, and seconds since the script started."""
    return {" ".join(line.split()[3:]): int(line.split()[1]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}


def test_the_machine_is_one_h100_and_the_build_took_242_s_with_its_clone():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB" in env and "2025.3.1" in env and "kvdiag main at bae167a" in env
    assert chain()["built rc=0"] - chain()["start"] == 242


# ------------------------------------------------------------------ D19: confirmed, and its fix verified

def _recorded_attempt(run_id: str):
    return recorded_attempt("D19", run_id, RUNS, "initcheck control passed")


def test_d19_is_confirmed_again_from_its_recorded_log_quoting_the_sink_read():
    attempt = _recorded_attempt(D19_RUN)
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any(SINK_SITE in line for line in attempt.evidence.quoted)
    assert attempt.evidence.error_count == 64
    run = (FIXTURE / "d19-run.txt").read_text()
    assert "D19 CONFIRMED" in run and SINK_KERNEL in run and "(23.9 s)" in run


def test_the_fixed_builds_log_holds_no_finding_and_the_same_kernel_ran():
    log = (RUNS / D19_AFTER / "logs" / "fast-1.sanitizer.log").read_text()
    report = parse_sanitizer(log, "initcheck")
    assert report.findings == () and report.error_count == 0
    assert _recorded_attempt(D19_AFTER).verdict is not Verdict.CONFIRMED
    run = json.loads((RUNS / D19_AFTER / "run.json").read_text())["outcome"]
    assert run["verdict"] == "not-reproduced"
    assert SINK_KERNEL in run["attempts"][0]["evidence"]["launched"]


def test_verify_called_the_fix_verified_with_the_numeric_cases_ok_on_both_sides():
    text = (FIXTURE / "d19-verify.txt").read_text()
    assert "conclusion: fix verified" in text and "source tree: untouched" in text
    assert re.search(r"verdict\s+confirmed\s+not-reproduced", text)
    assert re.search(r"sanitizer errors\s+64\s+0\n", text)
    assert re.search(r"numeric /nr23=.*/\s+8 OK / 0 FAIL\s+8 OK / 0 FAIL", text)
    assert "reusing run 20261207-074224.591253-0002-D19" in text


def test_d19_and_its_probe_name_the_measured_pair():
    assert "h100-session24" in (REGISTRY / "D19.md").read_text()
    probe = (REGISTRY.parent / "probes" / "D19-fix-bound-sink-read.patch").read_text()
    assert "output-correct: yes, measured" in probe and "h100-session24" in probe


# ------------------------------------------------------------------ getrows.cu:127: reads of cuBLAS's outputs

def mmid_log() -> str:
    with lzma.open(FIXTURE / "mmid-initcheck.log.xz", "rt") as opened:
        return strip_ansi(opened.read())


def gemm_outputs() -> list[int]:
    """The D address of each cuBLASLt matmul the process ran, in call order."""
    text = read_gz(FIXTURE / "mmid-cublaslt.log.gz")
    return [int(a, 16) for a in re.findall(r"\[Api\]\[cublasLtTSSMatmul\] .* D=0X([0-9A-F]+) ", text)]


def assert_every_read_at(text: str, site: str, count: int, size: int) -> None:
    """An initcheck log whose every record is an uninitialized read of ``size`` bytes at ``site``."""
    report = parse_sanitizer(text, "initcheck")
    assert report.error_count == count
    assert [(site_label(s), s.count) for s in report.sites] == [(site, count)]
    assert all(f"read of size {size} bytes" in f.message for f in report.findings)


def test_every_uninitialized_read_is_at_the_gather_of_the_expert_outputs():
    assert_every_read_at(mmid_log(), "getrows.cu:127", 131072, 16)


def test_the_reads_cover_the_sixteen_gemm_outputs_of_the_same_process_each_byte_once():
    outputs = gemm_outputs()
    assert len(outputs) == 16
    written = {d + offset for d in outputs for offset in range(0, GEMM_OUTPUT_BYTES, 16)}
    read = [int(a, 16) for a in re.findall(r"Address (0x[0-9a-f]+)", mmid_log())]
    assert len(read) == len(set(read)) == len(written) == 131072
    assert set(read) == written


def test_the_numeric_test_passed_in_the_same_process_and_alone():
    same = mmid_log()
    assert f"MUL_MAT_ID({MMID_CASE}): OK" in same and "1/1 tests passed" in same
    alone = strip_ansi((FIXTURE / "cublas-mmid-test.txt").read_text())
    assert f"MUL_MAT_ID({MMID_CASE}): OK" in alone


def test_the_gemms_were_cublas_calls_run_as_hopper_nvjet_kernels():
    api = read_gz(FIXTURE / "mmid-cublas-api.log.gz")
    calls = Counter(re.findall(r"function cublasStatus_t (\w+)\(", api))
    assert calls["cublasGemmEx"] == 16
    lt = read_gz(FIXTURE / "mmid-cublaslt.log.gz")
    assert set(re.findall(r"\[cublasLt\]\[(\d+)\]", lt)) == set(re.findall(r"Process=(\d+);", api))   # one process
    assert set(re.findall(r"algo=\[algoId=(\d+) ", lt)) == {"66"}
    kernels = Counter(re.findall(r"^  (?:void )?(\w+).*, Context \d+, Stream \d+, Device 0, CC 9\.0$",
                                 (FIXTURE / "ncu-mmid.txt").read_text(), re.M))
    assert kernels == {"nvjet_sm90_tss_8x64_64x16_4x2_h_bz_TNN": 16, "k_get_rows_float": 1, "k_get_rows_float_vec": 1}


def test_d20_confirms_the_recorded_case_and_names_the_gather_site(tmp_path):
    """The command D20's repro runs, as the device ran it by hand (no print limit there): confirmed."""
    argv = ["compute-sanitizer", "--tool", "initcheck", "--check-api-memory-access", "no", "--print-limit", "0",
            "--show-backtrace", "device", "test-backend-ops", "test", "-o", "MUL_MAT_ID", "-b", "CUDA0", "-p",
            f"^{MMID_CASE}$"]
    attempt = judged_log(REGISTRY, "D20", mmid_log(), tmp_path, argv)
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("getrows.cu:127" in line for line in attempt.evidence.quoted)
    d20 = load_registry(REGISTRY).get("D20")
    assert re.search(d20.default_step.vars["params"], MMID_CASE) and d20.default_step.vars["op"] == "MUL_MAT_ID"


def test_d20_does_not_confirm_the_other_gather_in_the_same_file(tmp_path):
    """GET_ROWS' own k_get_rows_float at getrows.cu:99 (session 21, host API checks off): the same file and
    tool, another kernel. The signature's kernel keeps it out: a different finding, inconclusive."""
    text = read_gz(DEVICE / "h100-session21" / "api-no.log.gz")
    attempt = judged_log(REGISTRY, "D20", text, tmp_path)
    assert attempt.verdict is Verdict.INCONCLUSIVE and "getrows.cu:99" in attempt.reason


def test_d20_names_the_gather_root_and_only_d21_names_another_cublas_root_and_d22_get_rows_own():
    from kvdiag.engine.discover.matching import match_roots
    from kvdiag.engine.discover.result import from_document

    roots = from_document(document()).roots
    match_roots(roots, load_registry(REGISTRY).entries)
    known = {root.key.site: root.known for root in roots}
    assert {site: entry for site, entry in known.items() if entry} == {
        "src/ggml-cuda/fattn-mma-f16.cuh:1357": "D19", "src/ggml-cuda/getrows.cu:127": "D20",
        "src/ggml-cuda/convert.cu:437": "D21",                      # D21 since session 25
        "src/ggml-cuda/getrows.cu:99": "D22",                        # GET_ROWS' own gather kernel: D22 (session 26)
        "src/ggml-cuda/mmq.cuh:925": "D23", "src/ggml-cuda/mmq.cuh:1124": "D23",   # MMQ's padding reads (26)
        "src/ggml-cuda/mmq.cuh:1346": "D23"}


def test_the_mul_mat_case_was_not_run_its_pattern_matched_nothing():
    assert "0/0 tests passed" in strip_ansi((FIXTURE / "cublas-mm-test.txt").read_text())


# ------------------------------------------------------------------ the whole suite under memcheck and initcheck

def test_the_whole_suite_under_memcheck_and_initcheck_was_judged_to_the_end_in_473_s():
    doc = document()
    assert doc["tools"] == ["memcheck", "initcheck"] and doc["workers"] == 16 and doc["interrupted"] is False
    assert round(doc["wall_s"], 1) == 473.3 and len(doc["processes"]) == 892
    totals = doc["totals"]
    assert totals["judged"] == 23884 and totals["cut"] == 0
    assert totals["by_tool"]["memcheck"]["findings"] == 0 and totals["by_tool"]["initcheck"]["findings"] == 53
    assert {c["state"] for c in doc["cases"]} <= {"clean", "findings", "not-supported"}
    assert round(sum(p["wall_s"] or 0 for p in doc["processes"])) == 7461


def test_sixteen_processes_held_under_8_gib_of_the_gpu_and_left_cores_idle():
    used, busy_gpu = gpu_samples(FIXTURE)
    assert max(used) == 7388 and 21 < sum(busy_gpu) / len(busy_gpu) < 22.5
    assert 10.8 < busy_cores(FIXTURE) < 11.2


def test_the_same_seven_roots_as_session_21_now_d19_among_them():
    roots = {r["site"]: r for r in document()["roots"]}
    earlier = json.loads(read_gz(DEVICE / "h100-session21" / "whole.json.gz"))["roots"]
    assert set(roots) == {r["site"] for r in earlier}
    assert {r["tool"] for r in roots.values()} == {"initcheck"}
    assert {site: r["known"] for site, r in roots.items() if r["known"]} == {"src/ggml-cuda/fattn-mma-f16.cuh:1357": "D19"}
    assert roots["src/ggml-cuda/fattn-mma-f16.cuh:1357"]["cases"] == 22
    assert roots["src/ggml-cuda/getrows.cu:127"]["smallest"]["params"] == MMID_CASE


@pytest.mark.parametrize("process", WHOLE_LOGS)
def test_a_recorded_initcheck_process_is_judged_again_as_the_device_judged_it(process):
    _, records = rejudge_unlisted(process, FIXTURE)
    before = recorded(document(), process, "initcheck")
    assert {r.params: r.state for r in records} == {p: c["state"] for p, c in before.items()}
    assert any(r.state == "findings" for r in records)
