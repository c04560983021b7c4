"""Device session 31 on an H100 (tests/fixtures/device/h100-session31): a build carried from another machine,
`kvdiag run D2` under a real MPS daemon, the MPS probe against that daemon, the blocking-sync arms of the
discovery benchmark, and `kvdiag scan D2` with the defaults twice.

Sleeping waits freed no core: the same discovery under MPS took 100.6 s spinning, 103.4 s asleep and 99.1 s
asleep with 24 processes, each keeping 12.7 of 16 cores busy. The MPS guard of `kvdiag run` held under a real
daemon (synccheck with `--destroy-on-device-error kernel`, D2 confirmed, no fatal error in the server's log).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from kvdiag.engine.discover.result import from_document
from kvdiag.records.verdict import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz  # noqa: E402
from test_recorded_h100_session21 import recorded_attempt  # noqa: E402
from sampled_load import arm_span, busy_cores, chain_stamps, gpu_samples  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session31"
RUNS = FIXTURE / "runs"
D2_UNDER_MPS = "20261207-215213.522277-0002-D2"
ARMS = ("mps-j16", "mps-j16-blocking", "mps-j24-blocking")


def bench(arm: str) -> dict:
    return json.loads((FIXTURE / f"bench-{arm}.json").read_text())["discover"]


def saved(arm: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"discover-{arm}.json.gz"))


def scan(name: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"{name}.json.gz"))


def test_one_h100_its_settings_untouched_and_the_carried_build_passed_abs_in_six_seconds():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, Default" in env and "2025.3.1" in env
    assert (FIXTURE / "compute-mode.txt").read_text().splitlines() == ["NVIDIA H100 80GB HBM3, Default"] * 2
    at = chain_stamps(FIXTURE)
    # Joined from two carried halves, checked against the recorded sha256, unpacked, run: no build on the device.
    assert at["carried build runs rc=0"] - at["start"] == 5
    abs_run = (FIXTURE / "ggml-carried-abs.txt").read_text()
    assert "Backend 1/2: CUDA0" in abs_run and "4/4 tests passed" in abs_run and "2/2 backends passed" in abs_run
    # This ninja (1.13) reads the carried build's log as too old and would re-run CMake: the build is stale here.
    assert "build log version is too old" in (FIXTURE / "ggml-carried-ninja-n.txt").read_text()
    assert "test-backend-ops-launch program built in 24.0 s" in (FIXTURE / "warmup.txt").read_text()


def test_the_mps_probe_found_the_running_daemon_and_none_after_quit():
    assert (FIXTURE / "mps-probe.txt").read_text().splitlines() == [
        "MpsPipe(folder='/tmp/kv/mps/pipe', named=True)", "None"]


def test_run_d2_under_a_real_daemon_ran_synccheck_destroying_the_kernel_only_and_confirmed():
    command = json.loads((RUNS / D2_UNDER_MPS / "logs" / "fast-1.cmd.json").read_text())
    argv = command["argv"]
    assert argv[argv.index("--tool") + 1] == "synccheck"
    assert argv[argv.index("--destroy-on-device-error") + 1] == "kernel"
    outcome = json.loads((RUNS / D2_UNDER_MPS / "run.json").read_text())["outcome"]
    assert outcome["verdict"] == "confirmed" and outcome["duration_s"] == 1.785
    assert (FIXTURE / "run-d2-mps" / "server-fatal-count.txt").read_text().split() == ["0"]
    server = read_gz(FIXTURE / "mps" / "server.log.gz")
    assert "fatal GPU error" not in server
    attempt = recorded_attempt("D2", D2_UNDER_MPS, RUNS, "synccheck control passed")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("fattn-mma-f16.cuh:1538" in line for line in attempt.evidence.quoted)


def test_sleeping_waits_freed_no_core_and_24_processes_gained_nothing():
    walls = {arm: bench(arm)["discover_wall_s"] for arm in ARMS}
    assert walls == {"mps-j16": 94.757, "mps-j16-blocking": 97.346, "mps-j24-blocking": 92.027}
    assert {arm: bench(arm)["cpu_s"] for arm in ARMS} == {
        "mps-j16": 1275.7, "mps-j16-blocking": 1299.1, "mps-j24-blocking": 1245.2}
    assert bench("mps-j16")["blocking_sync"] is None
    for arm in ARMS[1:]:
        assert bench(arm)["blocking_sync"] == {"processes_set": 163, "notes": []}
    assert all(line.endswith("status=0") for line in
               (FIXTURE / "blocking-sync-auto-jobs-16-blocking-sync.log").read_text().splitlines())
    for arm in ARMS:
        assert round(busy_cores(FIXTURE, *arm_span(FIXTURE, arm)), 1) == 12.7
        memory, _ = gpu_samples(FIXTURE, *arm_span(FIXTURE, arm))
        assert max(memory) < 6100


def test_the_three_arms_judged_the_same_case_runs_and_found_d2_alone():
    for arm in ARMS:
        doc = saved(arm)
        assert doc["totals"]["all"] == {"clean": 4825, "findings": 160, "aborted": 0, "not-supported": 0,
                                        "spared": 3475, "cut": 0}
        assert doc["mps"] == {"pipe": "/tmp/kv/mps/pipe", "named_by": "CUDA_MPS_PIPE_DIRECTORY"}   # the fixed probe
        result = from_document(doc)
        assert [(r.key.tool, r.key.site, r.cases) for r in result.defects] == [
            ("synccheck", "src/ggml-cuda/fattn-mma-f16.cuh:1538", 160)]
    assert (saved("mps-j16")["workers"], saved("mps-j24-blocking")["workers"]) == (16, 24)


def test_scan_d2_with_the_defaults_took_89_and_83_s_on_this_h100_with_the_same_verdicts():
    first, second = scan("scan-d2"), scan("scan-d2-second")
    assert (first["wall_s"], second["wall_s"]) == (89.28, 82.884)
    for doc in (first, second):
        assert doc["workers"] == 9 and doc["batch_size"] == 32 and len(doc["batches"]) == 64
        verdicts = [case["verdict"] for case in doc["cases"].values()]
        assert (verdicts.count("confirmed"), verdicts.count("not-reproduced"), verdicts.count("not-applicable")) == (
            1333, 701, 902)
    assert (first["phases"]["route"]["wall_s"], first["phases"]["detect"]["wall_s"]) == (27.357, 61.892)
    assert (second["phases"]["route"]["wall_s"], second["phases"]["detect"]["wall_s"]) == (24.776, 58.078)
    # Each detect process costs about 4.4 s however few cases it holds: the shortest of the 64 batches.
    assert min(b["wall_s"] for b in first["batches"]) == 4.398
    with gzip.open(FIXTURE / "scan-d2.txt.gz", "rt") as text:
        assert "2936 run with 9 worker(s) in 89.3 s" in text.read()


def bench_rows(run: str) -> dict[str, dict]:
    """The JSON lines bench_scan.py printed in one of the two batch-size runs, by variant."""
    lines = (FIXTURE / "batch-size" / run / "bench-scan.jsonl").read_text().splitlines()
    return {row["variant"]: row for row in map(json.loads, lines)}


def test_two_waves_of_batches_beat_the_old_batches_of_32_in_both_orders_with_the_same_verdicts():
    first, second = bench_rows("first"), bench_rows("second")
    # one warm H100 (another machine than the scans above), two bench runs in opposite orders
    assert json.dumps(first).count("GPU-215b0000-4051-e06b-d9f9-dbc8422f95df") == 3
    assert json.dumps(second).count("GPU-215b0000-4051-e06b-d9f9-dbc8422f95df") == 3
    walls = {run: {v: (row["wall_s"], row["detect_wall_s"], row["detect_processes"]) for v, row in rows.items()
                   if v != "warm-up"} for run, rows in (("first", first), ("second", second))}
    assert walls["first"] == {"9@0:auto": (70.338, 50.27, 64), "9@0/64:auto": (63.142, 43.33, 32),
                              "9@0/113:auto": (63.117, 42.237, 18)}
    assert walls["second"] == {"9@0/113:auto": (58.587, 40.564, 18), "9@0:auto": (67.535, 48.708, 64),
                               "9@0/128:auto": (65.176, 43.933, 16)}
    for rows in (first, second):
        assert all(row["affected"] == 1333 for v, row in rows.items() if v != "warm-up")
        assert all(row["verdicts_identical_to_baseline"] for v, row in rows.items() if "speedup" in row)
    # the first run's last variants did not run: the bench stopped at a batch over the CLI's bound
    assert "--batch 226: must be a whole number from 0 to 128" in (
        FIXTURE / "batch-size" / "first" / "bench-scan.err").read_text()
    # the automatic size is now what won: two batches per worker
    from kvdiag.engine.scan.batch import auto_batch_size
    assert auto_batch_size(2034, 9) == 113
