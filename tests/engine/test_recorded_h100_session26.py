"""Device session 26 on an H100 (tests/fixtures/device/h100-session26): `kvdiag run D21` confirmed on ggml; on the
BeeLlama fork's tarball D19 not reproduced and D21's case not selected; the fork's whole suite under memcheck and
initcheck; and copies of one sanitized command at once, which show the GPU, not the host, binding racecheck.

Recorded on ggml d99724f2 and the fork 775450a68, both source tarballs (no `.git`) built there: `kvdiag run D21`
on ggml, `kvdiag run D19` and `kvdiag run D21` on the fork, `benchmarks/bench_concurrency.py` over one TOP_K case
and 15 FLASH_ATTN_EXT cases under racecheck and the TOP_K case without a sanitizer, and `kvdiag discover --tool
memcheck,initcheck -j 16` over the fork's suite. Recorded logs are judged again with the engine.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvdiag.engine.discover.batch import Unit, judge_process, split_cases
from kvdiag.engine.discover.matching import match_roots
from kvdiag.engine.discover.result import from_document
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz, recorded  # noqa: E402
from test_recorded_h100_session21 import recorded_attempt  # noqa: E402
from sampled_load import busy_cores, gpu_samples  # noqa: E402

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
FIXTURE = DEVICE / "h100-session26"
REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RUNS = FIXTURE / "runs"
D21_GGML = "20261207-111116.501831-0002-D21"
D19_FORK = "20261207-111142.542437-0002-D19"
D21_FORK = "20261207-111213.899376-0002-D21"
FORK_MM_CASE = "type_a=f16,type_b=f32,m=16,n=8,k=1024,bs=[3,2],nr=[1,1],per=[0,1,2,3],k_v=0,o=1"
GGML_MM_CASE = FORK_MM_CASE + ",src_overlap=0"


def chain() -> dict[str, int]:
    """The script's time stamps: what happened, and seconds since the script started."""
    return {" ".join(line.split()[3:]): int(line.split()[1]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}


def fork_discovery() -> dict:
    return json.loads(read_gz(FIXTURE / "fork-discover.json.gz"))


def conc(name: str) -> dict[int, dict]:
    return {row["copies"]: row for row in json.loads((FIXTURE / f"conc-{name}.json").read_text())["rows"]}


def test_the_machine_is_one_h100_and_the_two_tarballs_built_in_192_and_400_s():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, Default" in env and "2025.3.1" in env
    assert "CPU(s):                                  16" in env
    stamps = chain()
    assert stamps["ggml built rc=0"] - stamps["extracted rc=0"] == 192
    assert stamps["fork built rc=0"] - stamps["ggml built rc=0"] == 400
    assert "[448/448] Linking CXX executable bin/test-backend-ops" in (FIXTURE / "builds.txt").read_text()


# ------------------------------------------------------------------ D21 on ggml, D19 and D21 on the fork

def test_kvdiag_run_d21_confirmed_on_ggml_and_its_log_confirms_again():
    text = (FIXTURE / "d21-run.txt").read_text()
    assert "D21 CONFIRMED" in text and "sanitizer errors: 768" in text and "(24.6 s)" in text
    assert "cublasGemmStridedBatchedEx" in text
    attempt = recorded_attempt("D21", D21_GGML, RUNS, "initcheck control passed")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("convert.cu:437" in line for line in attempt.evidence.quoted)


def test_d19_was_not_reproduced_on_the_fork_which_bounds_the_sink_read():
    text = (FIXTURE / "d19-fork-run.txt").read_text()
    assert "D19 NOT-REPRODUCED" in text and "initcheck control passed" in text
    assert "flash_attn_ext_f16<128, 128, 4, 8, false, false, (ggml_type)1, (ggml_type)1>" in text
    assert "sanitizer errors: 0" in text
    attempt = recorded_attempt("D19", D19_FORK, RUNS, "initcheck control passed")
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason


def test_the_forks_tarball_was_placed_by_ggmls_stamp_among_affected_commits_which_the_stamp_no_longer_claims():
    """The run said "affected by range ... placed by version stamp GGML_VERSION 0.19.0", while the fork's own
    change to fattn-mma-f16.cuh had bounded the read: a stamp now declines an entry whose own file matches no
    ggml version (tests/engine/test_placement.py)."""
    outcome = json.loads((RUNS / D19_FORK / "run.json").read_text())["outcome"]
    assert outcome["verdict"] == "not-reproduced"
    assert "placed by version stamp GGML_VERSION 0.19.0 (ggml/CMakeLists.txt)" in (FIXTURE / "d19-fork-run.txt").read_text()


def test_d21_selected_no_case_on_the_fork_and_its_pattern_now_selects_the_forks_case_and_ggmls():
    text = (FIXTURE / "d21-fork-run.txt").read_text()
    assert "D21 INCONCLUSIVE" in text and "k_v=0,o=1,src_overlap=0$" in text
    assert "cases: none printed" in text
    params = load_registry(REGISTRY).get("D21").default_step.vars["params"]
    fork_cases = {c["params"] for c in fork_discovery()["cases"] if c["op"] == "MUL_MAT"}
    ggml_cases = {c["params"] for c in json.loads(read_gz(DEVICE / "h100-session24" / "whole.json.gz"))["cases"]
                  if c["op"] == "MUL_MAT"}
    assert FORK_MM_CASE in fork_cases and GGML_MM_CASE in ggml_cases
    assert {c for c in fork_cases if re.search(params, c)} == {FORK_MM_CASE}
    assert {c for c in ggml_cases if re.search(params, c)} == {GGML_MM_CASE}
    assert not any(re.search(params.replace("(,src_overlap=0)?", ",src_overlap=0"), c) for c in fork_cases)


# ------------------------------------------------------------------ the fork's suite under memcheck and initcheck

def test_the_forks_whole_suite_under_memcheck_and_initcheck_was_judged_to_the_end_in_432_s():
    doc = fork_discovery()
    assert doc["tools"] == ["memcheck", "initcheck"] and doc["workers"] == 16 and doc["interrupted"] is False
    assert round(doc["wall_s"], 1) == 432.5 and len(doc["processes"]) == 1006
    assert doc["totals"]["judged"] == 27150 and doc["totals"]["cut"] == 0
    assert doc["totals"]["all"] == {"clean": 27068, "findings": 30, "aborted": 8, "not-supported": 44, "spared": 0,
                                    "cut": 0}
    assert round(sum(p["wall_s"] or 0 for p in doc["processes"])) == 6825
    assert "KVARN_STORE" in (FIXTURE / "fork-discover.txt").read_text()     # the fork's own ops, listed, no case


def test_the_forks_roots_name_d1_d21_d22_and_d23_and_neither_d19_nor_d20():
    """As the device matched them, D1 and D21; with D22 and D23 (written after the run from its roots and the
    source) every root is known."""
    doc = fork_discovery()
    assert {r["site"]: r["known"] for r in doc["roots"] if r["known"]} == {
        "ggml/src/ggml-cuda/fattn.cu:380": "D1", "ggml/src/ggml-cuda/convert.cu:486": "D21"}
    roots = from_document(doc).roots
    match_roots(roots, load_registry(REGISTRY).entries)
    by_site = {root.key.site: root for root in roots}
    assert {site: r.known for site, r in by_site.items() if r.known} == {
        "ggml/src/ggml-cuda/fattn.cu:380": "D1", "ggml/src/ggml-cuda/convert.cu:486": "D21",
        "ggml/src/ggml-cuda/getrows.cu:99": "D22", "ggml/src/ggml-cuda/mmq.cuh:1035": "D23",
        "ggml/src/ggml-cuda/mmq.cuh:1234": "D23", "ggml/src/ggml-cuda/mmq.cuh:1456": "D23"}
    assert set(by_site) == {"ggml/src/ggml-cuda/mmq.cuh:1035", "ggml/src/ggml-cuda/mmq.cuh:1234",
                            "ggml/src/ggml-cuda/mmq.cuh:1456", "ggml/src/ggml-cuda/getrows.cu:99",
                            "ggml/src/ggml-cuda/fattn.cu:380", "ggml/src/ggml-cuda/convert.cu:486"}
    aborts = [c for c in fork_discovery()["cases"] if c["state"] == "aborted"]
    assert len(aborts) == 8 and all(c["params"].startswith("hsk=320,hsv=256,") for c in aborts)


FORK_LOGS = ("initcheck-00534", "initcheck-00267", "memcheck-00253")


@pytest.mark.parametrize("process", FORK_LOGS)
def test_a_recorded_fork_process_is_judged_again_as_the_device_judged_it(process):
    record = json.loads(read_gz(FIXTURE / "logs" / "fork" / f"{process}.cmd.json.gz"))
    argv, result = record["argv"], record["result"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    tool = argv[argv.index("--tool") + 1]
    unit = Unit(tool, argv[argv.index("-o") + 1], cases)
    text = strip_ansi(read_gz(FIXTURE / "logs" / "fork" / f"{process}.stdout.log.gz"))
    errors = strip_ansi(read_gz(FIXTURE / "logs" / "fork" / f"{process}.stderr.log.gz"))
    outcome = judge_process(unit, split_cases(text, tool), text, name=process, log=process,
                            wall_s=result["duration_s"], timed_out=result["timed_out"], ended=result["description"],
                            budget_s=600.0, errors=errors, listed=False)
    before = recorded(fork_discovery(), process, tool)
    assert {r.params: r.state for r in outcome.records} == {p: c["state"] for p, c in before.items()}
    if process == "initcheck-00534":
        found = [r for r in outcome.records if r.params == FORK_MM_CASE][0]
        assert found.state == "findings" and {f.file for f in found.findings} == {"convert.cu"}
    else:
        assert [r.state for r in outcome.records] == ["aborted"] and "fattn.cu:380: fatal error" in errors


# ------------------------------------------------------------------ copies of one sanitized command at once

def test_racecheck_on_top_k_stops_scaling_at_four_copies_while_the_gpu_is_busy():
    rows = conc("topk-racecheck")
    assert [rows[n]["wall_s"] for n in (1, 4, 9, 16)] == [6.23, 14.36, 32.67, 54.55]
    assert [rows[n]["speedup"] for n in (4, 9, 16)] == [1.74, 1.72, 1.83]
    assert rows[1]["gpu_util"] == 75.0 and rows[9]["gpu_util"] > 94 and rows[16]["gpu_util"] > 94
    assert all(rows[n]["cut"] == 0 and rows[n]["returncodes"] == [0] for n in rows)


def test_the_same_work_costs_each_copy_more_host_cpu_the_more_copies_share_the_gpu():
    """The copies do the same work, yet each one's CPU time grows with their count (8.0 s alone, 51.4 s among
    16): the host's busy cores measured the copies waiting on the GPU, not work the host had to do."""
    rows = conc("topk-racecheck")
    per_copy = [rows[n]["cpu_s_per_copy"] for n in (1, 4, 9, 16)]
    assert per_copy == [8.0, 16.3, 33.7, 51.4]
    assert rows[1]["cores_busy"] < 1.5 and rows[16]["cores_busy"] > 15


def test_racecheck_on_flash_attention_and_the_unsanitized_case_scale_little_more():
    fa, plain = conc("fa-racecheck"), conc("topk-plain")
    assert [fa[n]["speedup"] for n in (4, 9, 16)] == [2.07, 2.57, 2.72]
    assert fa[1]["wall_s"] == 2.64 and fa[16]["gpu_util"] < 71
    assert [plain[n]["speedup"] for n in (4, 9, 16)] == [2.19, 2.94, 3.12] and plain[1]["wall_s"] == 0.62


def test_the_fork_discovery_kept_sixteen_processes_under_7_gib_and_its_host_and_gpu_partly_idle():
    used, busy_gpu = gpu_samples(FIXTURE)
    assert max(used) == 7114 and 27 < sum(busy_gpu) / len(busy_gpu) < 27.6
    assert 11.1 < busy_cores(FIXTURE) < 11.4


# ------------------------------------------------------------------ D22: the GET_ROWS root both trees show

GET_ROWS_LOG = DEVICE / "h100-session24" / "logs" / "whole" / "initcheck-00692.stdout.log.gz"


def test_d22_confirms_session_24s_recorded_get_rows_process_quoting_the_gather(tmp_path):
    from test_recorded_h100_session21 import judged_log

    text = strip_ansi(read_gz(GET_ROWS_LOG))
    attempt = judged_log(REGISTRY, "D22", text, tmp_path / "d22")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("getrows.cu:99" in line for line in attempt.evidence.quoted)
    assert "k_get_rows_float<int, int>" in attempt.evidence.instantiations
    other = judged_log(REGISTRY, "D20", text, tmp_path / "d20")
    assert other.verdict is not Verdict.CONFIRMED                    # D20's gather is k_get_rows_float_vec


def test_d22s_case_pattern_selects_the_smallest_i32_case_of_ggml_and_of_the_fork():
    params = load_registry(REGISTRY).get("D22").default_step.vars["params"]
    fork = {c["params"] for c in fork_discovery()["cases"] if c["op"] == "GET_ROWS"}
    ggml = {c["params"] for c in json.loads(read_gz(DEVICE / "h100-session24" / "whole.json.gz"))["cases"]
            if c["op"] == "GET_ROWS"}
    assert {c for c in fork if re.search(params, c)} == {"type=i32,dst_type=i32,n=256,m=5,r=4,be1=1,be2=1,v=1"}
    assert {c for c in ggml if re.search(params, c)} == {"type=i32,n=256,m=5,r=4,be1=1,be2=1,v=1"}
    roots = {r["site"]: r for r in fork_discovery()["roots"]}
    root = roots["ggml/src/ggml-cuda/getrows.cu:99"]
    assert root["smallest"]["params"] == "type=i32,dst_type=i32,n=256,m=5,r=4,be1=1,be2=1,v=1"
    assert (root["cases"], root["errors"]) == (4, 12228)          # as on ggml d99724f2 (session 24)


# ------------------------------------------------------------------ D23: MMQ's loads into unwritten padding

@pytest.mark.parametrize("process, sites", [("initcheck-00482", {"mmq.cuh:925"}),
                                            ("initcheck-00576", {"mmq.cuh:1124", "mmq.cuh:1346"})])
def test_d23_confirms_session_24s_recorded_mmq_processes_at_each_load(process, sites, tmp_path):
    from test_recorded_h100_session21 import judged_log

    text = strip_ansi(read_gz(DEVICE / "h100-session24" / "logs" / "whole" / f"{process}.stdout.log.gz"))
    attempt = judged_log(REGISTRY, "D23", text, tmp_path / "d23")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert {site["site"] for site in attempt.evidence.sites} == sites


def test_d23s_case_is_the_smallest_of_two_mmq_roots_in_both_trees():
    params = load_registry(REGISTRY).get("D23").default_step.vars["params"]
    case = "type_a=q1_0,type_b=f32,n_mats=4,n_used=2,b=0,m=64,n=16,k=384"
    assert re.fullmatch(params, case)
    fork = {r["site"]: r["smallest"]["params"] for r in fork_discovery()["roots"]}
    ggml = {r["site"]: r["smallest"]["params"]
            for r in json.loads(read_gz(DEVICE / "h100-session24" / "whole.json.gz"))["roots"]}
    assert fork["ggml/src/ggml-cuda/mmq.cuh:1035"] == fork["ggml/src/ggml-cuda/mmq.cuh:1456"] == case
    assert ggml["src/ggml-cuda/mmq.cuh:925"] == ggml["src/ggml-cuda/mmq.cuh:1346"] == case
