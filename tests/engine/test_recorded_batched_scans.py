"""Batched scans as kvdiag recorded them on a host with two H200s (ggml d99724f2).

Recordings: tests/fixtures/device/h200x2-ggml-session3 (README.md there). The truth
they are held against is session 2's scan of the same space with one process per case
(tests/fixtures/device/h200x2-ggml-llama-session2, scan …-249b).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
HERE = DEVICE / "h200x2-ggml-session3"
PER_CASE = DEVICE / "h200x2-ggml-llama-session2" / "scan-20261129-175539-scan-D2-249b.run.json.gz"


def load_gz_json(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def truth() -> dict[str, str]:
    return {p: c["verdict"] for p, c in load_gz_json(PER_CASE)["scan"]["cases"].items()}


@pytest.fixture(scope="module")
def two_gpus() -> dict:
    return load_gz_json(HERE / "scan-two-gpus.run.json.gz")["scan"]


def bench_rows(log: str = "device-x2-call8.log") -> dict[str, dict]:
    """The JSON lines bench_scan.py printed in a recorded device call, by variant."""
    rows = {}
    for line in (HERE / log).read_text().splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["variant"]] = row
    return rows


def test_a_recorded_batch_on_a_terminal_splits_into_the_per_case_verdicts(truth):
    text = strip_ansi(gzip.open(HERE / "batch-on-a-terminal.stdout.log.gz", "rt", errors="replace").read())
    split = split_cases(text, "synccheck")
    assert len(split.segments) == 9 and split.problems() == ()
    said = {s.case.params: ("confirmed" if s.findings else "not-reproduced") for s in split.segments}
    assert said == {p: truth[p] for p in said}
    assert sorted(s.error_count for s in split.segments if s.findings) == [256, 256, 257]
    cmd = json.loads((HERE / "batch-on-a-terminal.cmd.json").read_text())
    assert cmd["tty"] is True and "--log-file" not in cmd["argv"]
    assert cmd["argv"][-1].startswith("^(") and cmd["argv"][-1].count("|") == 8


def test_the_batched_scan_on_two_gpus_gives_every_case_its_per_case_verdict(two_gpus, truth):
    assert {p: c["verdict"] for p, c in two_gpus["cases"].items()} == truth
    assert two_gpus["counts"]["confirmed"] == 60 and two_gpus["counts"]["not-reproduced"] == 72
    assert two_gpus["batch_size"] == 9 and two_gpus["processes"] == len(two_gpus["batches"]) == 15
    assert two_gpus["ran_alone_after_batch"] == 0
    assert {c["device"]["index"] for c in two_gpus["cases"].values()} == {0, 1}
    assert all(c["device"]["uuid"].startswith("GPU-") for c in two_gpus["cases"].values())


def test_the_scan_table_recorded_says_how_the_cases_ran():
    text = (HERE / "scan-two-gpus.txt").read_text()
    assert "132 run with 16 worker(s) in 9.4 s" in text
    assert "processes: 15 batch(es) of up to 9 case(s)" in text
    assert "affected: 60   unaffected: 72   inconclusive: 0" in text
    assert re.search(r"^GPU 0 GPU-\S+: 69 case\(s\), 31 affected", text, re.M)
    assert re.search(r"^GPU 1 GPU-\S+: 63 case\(s\), 29 affected", text, re.M)


def test_the_recorded_benchmark_keeps_every_verdict_and_says_where_the_time_went():
    rows = bench_rows()
    assert set(rows) == {"8@0/1", "8@0", "8@0,1", "4@0", "4@0,1", "2@0", "2@0,1", "1@0", "1@0,1",
                         "8@0/32", "8@0,1/32"}
    assert all(r["verdicts_identical_to_baseline"] for v, r in rows.items() if v != "8@0/1")
    assert all(r["affected"] == 60 and r["cases"] == 132 for r in rows.values())
    # one process per case (the baseline) against batches, on one GPU: 39.3 s -> 9.0 s
    assert rows["8@0/1"]["processes"] == 132 and rows["8@0"]["processes"] == 8
    assert rows["8@0"]["speedup"] >= 4
    # a second GPU: 1.68x with one worker per GPU, none with eight (the host, not the GPUs, bounds it)
    assert rows["1@0,1"]["speedup_over_one_gpu"] >= 1.6
    assert rows["8@0,1"]["speedup_over_one_gpu"] < 1.1


def test_canary_processes_start_no_faster_on_two_gpus_while_their_kernels_do():
    """Eight short CUDA processes take the same wall on one GPU or two, plain or sanitized;
    the kernel work inside them halves with a second GPU (device-x2-call9.log)."""
    rows = {}
    for line in (HERE / "device-x2-call9.log").read_text().splitlines():
        m = re.match(r"^(\S+): (\d+) proc, wall ([\d.]+) s; in-process work mean ([\d.]+)", line)
        if m:
            rows[m.group(1)] = (float(m.group(3)), float(m.group(4)))
    for kind in ("plain-launch", "san-launch", "san-alloc", "san-kernels"):
        one, two = rows[f"{kind}-8"], rows[f"{kind}-4x2"]
        assert abs(one[0] - two[0]) / one[0] < 0.15          # wall: the same within 15 %
    assert rows["san-launch-4x2"][1] < 0.6 * rows["san-launch-8"][1]   # kernels: about half


def test_dealt_batches_keep_every_verdict_and_are_as_fast_on_one_gpu_as_on_two():
    rows = bench_rows("device-x2-call12.log")
    assert all(r["verdicts_identical_to_baseline"] for v, r in rows.items() if v != "8@0/1")
    assert rows["8@0/1"]["wall_s"] > 40 and rows["8@0"]["speedup"] >= 4.8
    # the default on two GPUs now: 4 workers on each, as fast as 8 on one; 8 on each is slower
    assert abs(rows["4@0,1"]["wall_s"] - rows["8@0"]["wall_s"]) < 0.5
    assert rows["8@0,1"]["wall_s"] > rows["8@0"]["wall_s"] + 2
    # where a GPU is the constraint (one worker each), the second one pays
    assert rows["1@0,1"]["speedup_over_one_gpu"] >= 1.8


def test_cupy_s_cut_uuid_was_recorded_as_it_happened():
    """The run that found it: GPU 1's UUID holds a zero byte; the fingerprint (from cupy)
    kept only the bytes before it (fixed since: see tests/workspace/test_target_gpu.py)."""
    smi = (HERE / "device-x2-call12.log").read_text()
    assert "1, NVIDIA H200, GPU-0d4134fc-10d5-59e4-1f21-0077caab442a" in smi
    gpu = load_gz_json(HERE / "scan-dealt-two-gpus.run.json.gz")["target"]["environment"]["gpu"]
    assert gpu["source"] == "cupy"
    assert [d["uuid"] for d in gpu["devices"]] == ["GPU-8491d29c-c2a8-e4c5-9873-5d217a953493", "0d4134fc10d559e41f21"]
