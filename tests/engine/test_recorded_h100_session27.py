"""Device session 27 on an H100 (tests/fixtures/device/h100-session27): copies of one racecheck command with and
without MPS, `kvdiag run D22 D23 D21` confirmed on ggml, and the whole suite under racecheck and synccheck with
16 processes sharing one MPS server.

Recorded on ggml d99724f2 from a source tarball built there. MPS let sixteen racecheck copies of a TOP_K case
finish almost together (9.97 × the throughput of one, against 1.94 × as separate contexts); the whole suite under
racecheck and synccheck with MPS and 16 processes judged 95 % of its case runs in 997 s, and the host's cores, not
the GPU, were then full. Recorded logs are judged again with the engine.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tarfile
from collections import Counter
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
FIXTURE = DEVICE / "h100-session27"
REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RUNS = FIXTURE / "runs"
D22_RUN = "20261207-130302.857125-0002-D22"
D23_RUN = "20261207-130326.104668-0003-D23"
D21_RUN = "20261207-130327.494169-0004-D21"


def chain() -> dict[str, int]:
    """The script's time stamps: what happened, and seconds since the script started."""
    return {" ".join(line.split()[3:]): int(line.split()[1]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}


def whole() -> dict:
    return json.loads(read_gz(FIXTURE / "whole-discover.json.gz"))


def arms(name: str) -> dict[str, dict[int, dict]]:
    doc = json.loads((FIXTURE / f"conc-{name}.json").read_text())
    return {arm: {row["copies"]: row for row in data["rows"]} for arm, data in doc["arms"].items()}


def test_the_machine_is_one_h100_in_compute_mode_default_before_and_after_the_mps_daemon():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, Default" in env and "2025.3.1" in env
    assert "nvidia-cuda-mps-control" in env and "CPU(s):                                  16" in env
    modes = [line for line in (FIXTURE / "compute-mode.txt").read_text().splitlines() if "H100" in line]
    assert modes == ["NVIDIA H100 80GB HBM3, Default"] * 3            # before, after the copies, after the suite
    stamps = chain()
    assert stamps["ggml built rc=0"] - stamps["extracted rc=0"] == 213
    assert "[176/176] Linking CXX executable bin/test-backend-ops" in (FIXTURE / "builds.txt").read_text()
    assert stamps["mps daemon rc=0"] == stamps["whole discover start W=1000"] and "mps quit rc=0" in stamps


# ------------------------------------------------------------------ copies at once, with and without MPS

def test_with_mps_sixteen_racecheck_copies_of_top_k_did_ten_times_the_work_of_one_in_the_same_run():
    runs = arms("topk-racecheck")
    contexts, mps = runs["contexts"], runs["mps"]
    assert [contexts[n]["speedup"] for n in (4, 9, 16)] == [1.76, 1.89, 1.94]
    assert [mps[n]["speedup"] for n in (4, 9, 16)] == [3.75, 7.35, 9.97]
    assert (contexts[16]["wall_s"], mps[16]["wall_s"]) == (56.8, 10.0)
    assert all(row["cut"] == 0 and row["returncodes"] == [0] for arm in runs.values() for row in arm.values())


def test_with_mps_a_copy_costs_the_same_host_cpu_alone_or_among_sixteen():
    """Session 26 saw each copy's CPU time grow with the copies (the host threads waiting on the GPU); with
    kernels of all copies on the GPU at once it stays at one copy's, so the host's busy cores are work."""
    runs = arms("topk-racecheck")
    assert [runs["contexts"][n]["cpu_s_per_copy"] for n in (1, 16)] == [8.3, 53.7]
    assert [runs["mps"][n]["cpu_s_per_copy"] for n in (1, 4, 9, 16)] == [7.8, 8.0, 8.3, 8.3]


def test_flash_attention_s_copies_gain_less_from_mps_as_the_host_fills():
    runs = arms("fa-racecheck")
    assert [runs["contexts"][n]["speedup"] for n in (4, 9, 16)] == [2.27, 2.74, 2.91]
    assert [runs["mps"][n]["speedup"] for n in (4, 9, 16)] == [2.92, 3.34, 3.53]
    assert runs["mps"][16]["cores_busy"] > 14 and runs["mps"][1]["cores_busy"] > 2     # two cores a copy


@pytest.mark.parametrize("name", ["topk-racecheck", "fa-racecheck"])
def test_every_copy_with_mps_printed_its_test_ok_and_a_clean_racecheck_summary(name):
    with tarfile.open(FIXTURE / f"conc-logs-{name}.tgz") as tar:
        logs = {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    mps = {n: text for n, text in logs.items() if n.startswith("mps-copy-")}
    assert len(mps) == 1 + 4 + 9 + 16
    for text in mps.values():
        assert "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" in text
        assert re.search(r"\d+/\d+ backends passed", strip_ansi(text))


def test_the_mps_server_served_the_copies_and_quit_when_told():
    control = gzip.decompress((FIXTURE / "mps" / "control.log.gz").read_bytes()).decode()
    assert "Starting control daemon using socket /tmp/kv/mps/pipe/control" in control
    assert control.rstrip().endswith("Exit with status 0") and "Cmd:quit" in control
    apps = read_gz(FIXTURE / "apps.log.gz")
    assert "nvidia-cuda-mps-server" in apps                     # the bench's own daemon, during its mps arm


def test_the_synccheck_control_s_deliberate_divergence_is_a_fatal_gpu_error_to_the_mps_server():
    """The control runs with the tool's default `--destroy-on-device-error context`: under MPS that is a
    fatal error the server handles by tearing the process down and resetting the device's server context.
    It ran alone (before the pool), so no other client saw it; a case's finding in the pool (`kernel`) is
    not one: the server logged no other."""
    server = gzip.decompress((FIXTURE / "mps" / "server.log.gz").read_bytes()).decode()
    assert server.count("Server is handling a fatal GPU error.") == 1
    fatal = server.index("Server is handling a fatal GPU error.")
    assert "[2026-12-07 13:03:34.984" in server[fatal - 40:fatal]
    cmd = json.loads(read_gz(FIXTURE / "logs" / "controls" / "barrier_divergent.synccheck.cmd.json.gz"))
    assert cmd["started_at"] == "2026-12-07T13:03:34.329+00:00" and cmd["result"]["returncode"] == 99
    assert "--destroy-on-device-error" not in cmd["argv"]
    assert "Number of active client contexts is 0" in server[fatal:fatal + 2000]


# ------------------------------------------------------------------ D22, D23 and D21 run on ggml

@pytest.mark.parametrize("entry, run_id, site, seconds", [("D22", D22_RUN, "getrows.cu:99", "23.2"),
                                                          ("D23", D23_RUN, "mmq.cuh:925", "1.4"),
                                                          ("D21", D21_RUN, "convert.cu:437", "1.0")])
def test_kvdiag_run_confirmed_each_and_its_recorded_log_confirms_again(entry, run_id, site, seconds):
    text = (FIXTURE / "runs.txt").read_text()
    block = text[text.index(f"{entry} CONFIRMED"):]
    assert f"({seconds} s)" in block.split("\nD2")[0]
    attempt = recorded_attempt(entry, run_id, RUNS, "initcheck control passed")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any(site in line for line in attempt.evidence.quoted)


def test_d23_s_run_launched_the_mmq_kernel_its_entry_names_and_d22_s_the_i32_gather():
    text = (FIXTURE / "runs.txt").read_text()
    assert "mul_mat_q<(ggml_type)41, 16, true>" in text and "k_get_rows_float<int, int>" in text
    for run_id in (D22_RUN, D23_RUN, D21_RUN):
        assert json.loads((RUNS / run_id / "run.json").read_text())["outcome"]["verdict"] == "confirmed"


# ------------------------------------------------------------------ the whole suite, racecheck and synccheck, MPS

def test_the_whole_suite_with_mps_and_16_processes_judged_95_percent_in_997_s():
    doc = whole()
    assert doc["tools"] == ["racecheck", "synccheck"] and doc["workers"] == 16 and doc["interrupted"] is True
    assert round(doc["wall_s"], 1) == 996.8 and len(doc["processes"]) == 574
    assert (doc["totals"]["judged"], doc["totals"]["cut"]) == (22687, 1197)
    assert doc["occupancy"] == {"most": 16, "pool": 16, "span_s": 996.8, "below_pool_s": 7.8, "tail_s": 4.8}
    session25 = json.loads(read_gz(DEVICE / "h100-session25" / "whole.json.gz"))
    assert (session25["workers"], session25["totals"]["judged"], round(session25["wall_s"], 1)) == (9, 19710, 1032.4)


def test_every_cut_case_run_says_why_and_most_never_started():
    cut = [c for c in whole()["cases"] if c["state"] == "cut"]
    why = Counter("never started" if c["why"].startswith("not run: the discovery was interrupted") else
                  "running" if c["why"] == "interrupted (Ctrl-C) before it was judged" else c["why"] for c in cut)
    assert why == {"never started": 936, "running": 261}


def test_the_host_was_full_and_the_gpu_busy_through_the_run():
    used, busy_gpu = gpu_samples(FIXTURE)
    assert max(used) == 6671 and 96 < sum(busy_gpu) / len(busy_gpu) < 96.4
    assert 14.7 < busy_cores(FIXTURE) < 14.9


def test_the_roots_are_d2_at_both_barriers_of_its_pair_and_d18():
    """synccheck named the else branch's `__syncthreads()` (line 1563) in 33 cases that also hit line 1538;
    session 25's run of the same cases named 1538 only. D2's signature takes either."""
    doc = whole()
    assert [(r["site"], r["known"], r["cases"]) for r in doc["roots"]] == [
        ("src/ggml-cuda/fattn-mma-f16.cuh:1538", "D2", 1333), ("src/ggml-cuda/fattn-mma-f16.cuh:1563", "D2", 33),
        ("cuda_fp16.h:5122", "D18", 8)]
    roots = from_document(doc).roots
    match_roots(roots, load_registry(REGISTRY).entries)
    assert [r.known for r in roots if not r.key.warning] == ["D2", "D2", "D18"]
    assert len(doc["warnings"]) == 10 and all(w["known"] is None for w in doc["warnings"])


@pytest.mark.parametrize("process, tool", [("synccheck-00056", "synccheck"), ("racecheck-00068", "racecheck")])
def test_a_recorded_process_is_judged_again_as_the_device_judged_it(process, tool):
    record = json.loads(read_gz(FIXTURE / "logs" / "whole" / f"{process}.cmd.json.gz"))
    argv, result = record["argv"], record["result"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    unit = Unit(tool, argv[argv.index("-o") + 1], cases)
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / f"{process}.stdout.log.gz"))
    errors = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / f"{process}.stderr.log.gz"))
    outcome = judge_process(unit, split_cases(text, tool), text, name=process, log=process,
                            wall_s=result["duration_s"], timed_out=result["timed_out"], ended=result["description"],
                            budget_s=600.0, errors=errors, listed=tool == "synccheck")
    before = recorded(whole(), process, tool)
    assert {r.params: r.state for r in outcome.records} == {p: c["state"] for p, c in before.items()}
    lines = {f.line for r in outcome.records for f in r.findings}
    assert lines == ({1538, 1563} if tool == "synccheck" else {5122})


# ------------------------------------------------------------------ the controls under MPS, ending only the kernel

CONTROLS = FIXTURE / "controls-mps"


def test_every_control_passed_under_mps_and_without_each_ending_only_its_kernel():
    for name in ("doctor-mps.txt", "doctor-plain.txt"):
        text = (CONTROLS / name).read_text()
        assert [line.split()[2] for line in text.splitlines() if line.startswith("PASS  control ")] == [
            "memcheck", "racecheck", "synccheck", "initcheck"]
        assert "FAIL" not in text and "trusted: memcheck, racecheck, synccheck, initcheck" in text
    runs = [json.loads(path.read_text()) for path in sorted((CONTROLS / "cmd").glob("*check.cmd.json"))]
    assert len(runs) == 8
    for run in runs:
        argv = run["argv"]
        assert argv[argv.index("--destroy-on-device-error") + 1] == "kernel"
    assert sorted(run["result"]["returncode"] for run in runs) == [0, 0, 0, 0, 99, 99, 99, 99]


def test_the_mps_server_served_the_controls_and_logged_no_fatal_error():
    server = gzip.decompress((CONTROLS / "mps-server.log.gz").read_bytes()).decode()
    assert server.count(" connected") >= 8 and "fatal GPU error" not in server
    assert "daemon rc=0" in (CONTROLS / "chain.txt").read_text() and "fatal: 0" in (CONTROLS / "chain.txt").read_text()
