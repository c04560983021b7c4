"""Device session 25 on an H100 (tests/fixtures/device/h100-session25): `kvdiag run D20` confirmed; MUL_MAT's
`convert.cu:437` root explained in one process (now D21); racecheck's host threads measured on one op's cases;
the whole suite under racecheck and synccheck run against a 1037 s deadline.

Recorded on ggml d99724f2 built there: `kvdiag run D20`, the MUL_MAT case alone under initcheck in test mode with
cuBLAS's logs on and under Nsight Compute, `benchmarks/bench_discover.py` over FLASH_ATTN_EXT's `hsk=72` cases
under racecheck with four arms, and `kvdiag discover --tool racecheck,synccheck --case-budget 600`. Recorded
logs are judged again with the engine.
"""

from __future__ import annotations

import json
import lzma
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvdiag.engine.discover.matching import match_roots
from kvdiag.engine.discover.result import from_document
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz, recorded, rejudge  # noqa: E402
from test_recorded_h100_session21 import judged_log, recorded_attempt  # noqa: E402
from sampled_load import busy_cores, gpu_samples  # noqa: E402
from test_recorded_h100_session24 import assert_every_read_at  # noqa: E402

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
FIXTURE = DEVICE / "h100-session25"
REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RUNS = FIXTURE / "runs"
D20_RUN = "20261207-092540.640531-0002-D20"
MM_CASE = "type_a=f16,type_b=f32,m=16,n=8,k=1024,bs=[3,2],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0"
MM_ARGV = ["compute-sanitizer", "--tool", "initcheck", "--check-api-memory-access", "no", "--print-limit", "0",
           "--show-backtrace", "device", "test-backend-ops", "test", "-o", "MUL_MAT", "-b", "CUDA0", "-p",
           r"^type_a=f16,type_b=f32,m=16,n=8,k=1024,bs=\[3,2\],nr=\[1,1\],per=\[0,1,2,3\],k_v=0,o=1,src_overlap=0$"]
ARMS = ["auto", "auto:racecheck-workers-1", "auto:racecheck-workers-2", "auto:racecheck-workers-1:jobs-16"]


def chain() -> dict[str, int]:
    """The script's time stamps: what happened, and seconds since the script started."""
    return {" ".join(line.split()[3:]): int(line.split()[1]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}


def whole() -> dict:
    return json.loads(read_gz(FIXTURE / "whole.json.gz"))


def test_the_machine_is_one_h100_and_the_build_took_217_s_with_its_clone():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB" in env and "2025.3.1" in env and "kvdiag main at c6b3096" in env
    assert chain()["built rc=0"] - chain()["start"] == 217


# ------------------------------------------------------------------ D20 by its own run

def test_kvdiag_run_d20_confirmed_on_the_device_and_its_log_confirms_again():
    attempt = recorded_attempt("D20", D20_RUN, RUNS, "initcheck control passed")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("getrows.cu:127" in line for line in attempt.evidence.quoted)
    assert attempt.evidence.error_count == 131072
    run = (FIXTURE / "d20-run.txt").read_text()
    assert "D20 CONFIRMED" in run and "1/1 runs matched the signature" in run and "(44.2 s)" in run
    command = json.loads((RUNS / D20_RUN / "logs" / "fast-1.cmd.json").read_text())
    assert command["result"]["returncode"] == 99 and round(command["result"]["duration_s"], 1) == 20.6
    assert json.loads((RUNS / D20_RUN / "run.json").read_text())["outcome"]["verdict"] == "confirmed"


# ------------------------------------------------------------------ convert.cu:437 in one process: D21

def mm_log() -> str:
    with lzma.open(FIXTURE / "mm-initcheck.log.xz", "rt") as opened:
        return strip_ansi(opened.read())


def gemm_output() -> tuple[int, int]:
    """The one cuBLASLt matmul's output D: its address and its size in bytes (halves, every matrix of the batch)."""
    text = read_gz(FIXTURE / "mm-cublaslt.log.gz")
    (trace,) = re.findall(r"\[Trace\]\[cublasLtHHHMatmul\] (.*)", text)
    address = int(re.search(r" D=0X([0-9A-F]+) ", trace)[1], 16)
    rows, cols, ld, batch, stride = map(int, re.search(
        r"Ddesc=\[type=R_16F rows=(\d+) cols=(\d+) ld=(\d+) batchCount=(\d+) stridedBatchOffset=(\d+)\]", trace).groups())
    assert ld == rows and stride == rows * cols                         # packed: every element is written
    return address, batch * stride * 2


def test_every_uninitialized_read_is_at_the_conversion_of_the_gemm_output():
    assert_every_read_at(mm_log(), "convert.cu:437", 768, 2)


def test_the_reads_cover_the_batched_gemm_output_of_the_same_process_each_half_once():
    address, size = gemm_output()
    assert size == 1536
    read = [int(a, 16) for a in re.findall(r"Address (0x[0-9a-f]+)", mm_log())]
    assert len(read) == len(set(read)) == 768
    assert set(read) == set(range(address, address + size, 2))


def test_the_numeric_test_passed_in_the_same_process_and_alone():
    assert f"MUL_MAT({MM_CASE}): OK" in mm_log() and "1/1 tests passed" in mm_log()
    assert f"MUL_MAT({MM_CASE}): OK" in strip_ansi((FIXTURE / "mm-test.txt").read_text())


def test_the_gemm_was_one_strided_batched_cublas_call_run_as_a_hopper_xmma_kernel():
    api = read_gz(FIXTURE / "mm-cublas-api.log.gz")
    calls = Counter(re.findall(r"function cublasStatus_t (\w+)\(", api))
    assert calls["cublasGemmStridedBatchedEx"] == 1 and calls["cublasGemmEx"] == 0
    assert "val=CUBLAS_COMPUTE_16F" in api and "C: type=void; val=POINTER (IN HEX:0x0x2a9a018000)" in api
    lt = read_gz(FIXTURE / "mm-cublaslt.log.gz")
    assert set(re.findall(r"algo=\[algoId=(\d+) ", lt)) == {"39"}
    kernels = Counter(re.findall(r"^  (?:void )?(\w+).*, Context \d+, Stream \d+, Device 0, CC 9\.0$",
                                 (FIXTURE / "mm-ncu.txt").read_text(), re.M))
    assert kernels == {"convert_unary": 2, "sm90_xmma_gemm_f16f16_f16f16_f16_tn_n_tilesize64x64x64_warpgroupsize1x1x1"
                       "_execute_segment_k_off_kernel__5x_cublas": 1}


def test_d21_confirms_the_recorded_case_and_its_repro_selects_it(tmp_path):
    attempt = judged_log(REGISTRY, "D21", mm_log(), tmp_path, MM_ARGV)
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("convert.cu:437" in line for line in attempt.evidence.quoted)
    step = load_registry(REGISTRY).get("D21").default_step
    assert re.fullmatch(step.vars["params"], MM_CASE) and step.vars["op"] == "MUL_MAT"


def test_neither_cublas_entry_confirms_the_others_log():
    """D21 names D20 as related, so D20's reads in a D21 run are set apart and named, not a different failure;
    D20 relates only to D19, so D21's reads leave a D20 run inconclusive."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        mmid = strip_ansi(lzma.open(DEVICE / "h100-session24" / "mmid-initcheck.log.xz", "rt").read())
        d21_on_gather = judged_log(REGISTRY, "D21", mmid, Path(tmp) / "a")
        assert d21_on_gather.verdict is Verdict.NOT_REPRODUCED
        assert "the other findings: 131072 of D20's signature (getrows.cu:127)" in d21_on_gather.reason
        d20_on_convert = judged_log(REGISTRY, "D20", mm_log(), Path(tmp) / "b", MM_ARGV)
        assert d20_on_convert.verdict is Verdict.INCONCLUSIVE
        assert "a different sanitizer finding: 768 error(s) at convert.cu:437" in d20_on_convert.reason


def test_discovery_now_names_both_cublas_roots_of_session_24():
    roots = from_document(json.loads(read_gz(DEVICE / "h100-session24" / "whole.json.gz"))).roots
    match_roots(roots, load_registry(REGISTRY).entries)
    known = {root.key.site: root.known for root in roots if root.known}
    cublas = ("src/ggml-cuda/getrows.cu:127", "src/ggml-cuda/convert.cu:437")
    assert {site: known.get(site) for site in cublas} == {cublas[0]: "D20", cublas[1]: "D21"}


# ------------------------------------------------------------------ racecheck's host threads

def ab() -> dict:
    return json.loads((FIXTURE / "ab-workers.json").read_text())


def test_every_arm_judged_the_same_560_cases_alike_and_none_was_cut():
    report = ab()
    assert list(report["programs"]) == ARMS
    for row in report["programs"].values():
        assert row["exit"] == 0 and row["totals"]["judged"] == 560 and row["totals"]["cut"] == 0
    assert [(c["arms"][1], c["cases_judged_by_both"], c["agree"]) for c in report["compare_all"]] == [
        (arm, 560, 560) for arm in ARMS[1:]]


def test_the_tools_own_thread_count_was_fastest_and_fewer_threads_cost_more_host_cpu():
    arms = ab()["programs"]
    assert [arms[a]["wall_s"] for a in ARMS] == [53.79, 76.3, 62.78, 74.88]
    assert [arms[a]["cpu_s"] for a in ARMS] == [615.4, 907.0, 777.6, 888.7]
    ratios = [c["ops_both_finished"]["FLASH_ATTN_EXT"]["ratio"] for c in ab()["compare_all"]]
    assert ratios == [1.547, 1.261, 2.086]
    docs = {a: json.loads(read_gz(FIXTURE / f"ab-discover-{a.replace(':', '-')}.json.gz")) for a in ARMS}
    assert [docs[a]["racecheck_workers"] for a in ARMS] == [None, 1, 2, 1]
    assert [docs[a]["workers"] for a in ARMS] == [9, 9, 9, 16]


def _threads_of_sanitized_processes(first: float, last: float) -> Counter:
    seen: Counter = Counter()
    for line in read_gz(FIXTURE / "procs.log.gz").splitlines():
        if first <= float(line.split()[1]) <= last:
            seen.update(re.findall(r"test-backend-op thr=(\d+)", line))
    return seen


def test_a_sanitized_process_ran_23_threads_by_default_9_with_one_worker_and_10_with_two():
    from datetime import datetime

    def window(arm: str) -> tuple[float, float]:
        doc = json.loads(read_gz(FIXTURE / f"ab-discover-{arm.replace(':', '-')}.json.gz"))
        start = datetime.fromisoformat(doc["started_at"]).timestamp()
        return start, start + doc["wall_s"]

    modes = [_threads_of_sanitized_processes(*window(a)).most_common(1)[0][0] for a in ARMS[:3]]
    assert modes == ["23", "9", "10"]


# ------------------------------------------------------------------ the whole suite under racecheck and synccheck

def test_the_whole_suite_judged_83_percent_of_its_case_runs_by_the_1037_s_deadline():
    doc = whole()
    assert doc["tools"] == ["racecheck", "synccheck"] and doc["workers"] == 9 and doc["interrupted"] is True
    assert doc["racecheck_workers"] is None and doc["backtrace"] == "auto"
    assert round(doc["wall_s"], 1) == 1032.4 and len(doc["processes"]) == 483
    totals = doc["totals"]
    assert (totals["judged"], totals["cut"]) == (19710, 4174) and totals["all"]["spared"] == 4741
    assert round(sum(p["wall_s"] or 0 for p in doc["processes"])) == 9277
    assert chain()["whole rc=124"] - chain()["whole start W=1037"] == 1039


def test_top_k_under_racecheck_started_last_and_set_the_wall():
    doc = whole()
    seconds = Counter()
    for p in doc["processes"]:
        seconds[(p["op"], p["tool"])] += p["wall_s"] or 0
    assert [(k, round(v)) for k, v in seconds.most_common(3)] == [
        (("TOP_K", "racecheck"), 2668), (("FLASH_ATTN_EXT", "racecheck"), 2573), (("FLASH_ATTN_EXT", "synccheck"), 1022)]
    top_k = [p for p in doc["processes"] if p["op"] == "TOP_K" and p["tool"] == "racecheck"]
    order = [int(p["process"].split("-")[1]) for p in doc["processes"]]
    assert len(top_k) == 10 and min(int(p["process"].split("-")[1]) for p in top_k) >= sorted(order)[-30]
    listing = [int(p["process"].split("-")[1]) for p in doc["processes"] if p["op"] == "TOP_K" and p["tool"] == "synccheck"]
    assert (min(listing), max(listing)) == (447, 468)        # synccheck lists them, heaviest by elements first
    stopped = [p for p in top_k if "interrupted" in (p["why"] or "")]
    assert len(stopped) == 8 and min(p["wall_s"] for p in stopped) > 275
    cases = Counter(c["state"] for c in doc["cases"] if c["op"] == "TOP_K" and c["tool"] == "racecheck")
    assert cases == {"clean": 257, "cut": 43}


def test_the_host_was_busier_than_the_gpu_was_idle():
    start, end = 1796635857, 1796636896
    assert 13.3 < busy_cores(FIXTURE, start, end) < 13.7
    _, busy = gpu_samples(FIXTURE, start, end)
    assert 93 < sum(busy) / len(busy) < 94 and max(gpu_samples(FIXTURE)[0]) < 7000


def test_the_roots_are_d2_and_d18_and_the_warnings_session_20s_nine_and_one_more():
    doc = whole()
    assert {r["site"]: (r["known"], r["cases"]) for r in doc["roots"]} == {
        "src/ggml-cuda/fattn-mma-f16.cuh:1538": ("D2", 1333), "cuda_fp16.h:5122": ("D18", 8)}
    earlier = {w["site"] for w in json.loads(read_gz(DEVICE / "h100-session20" / "whole.json.gz"))["warnings"]}
    assert {w["site"] for w in doc["warnings"]} == earlier | {"cuda_fp16.hpp:264"}


def test_top_k_sorted_its_rows_with_cubs_radix_sort_in_this_build():
    """TOP_K's own listing under synccheck: CCCL 3.0.1 (CUB_300001) has no DeviceTopK (top-k.cu wants 3.2),
    so the op falls back to argsort, CUB's radix and segmented sorts for rows past the bitonic kernel's 1024."""
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / "synccheck-00448.stdout.log.gz"))
    kernels = Counter(re.sub(r"<.*", "", line.split("kvdiag-launch: ", 1)[1]).removeprefix("void ")
                      for line in text.splitlines() if "kvdiag-launch: " in line)
    assert kernels["cub::CUB_300001_SM_900::detail::radix_sort::DeviceRadixSortOnesweepKernel"] == 56
    assert kernels["k_argsort_f32_i32"] > 0
    assert not any("TopK" in name for name in kernels)


@pytest.mark.parametrize("process, found", [("racecheck-00063", True), ("racecheck-00380", True),
                                            ("synccheck-00083", True), ("synccheck-00448", False)])
def test_a_recorded_process_is_judged_again_as_the_device_judged_it(process, found):
    unit, records, _ = rejudge("whole", process, FIXTURE)
    before = recorded(whole(), process, unit.tool)
    assert {r.params: r.state for r in records} == {p: c["state"] for p, c in before.items()}
    assert any(r.state == "findings" for r in records) is found
