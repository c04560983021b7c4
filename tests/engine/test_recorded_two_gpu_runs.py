"""Multi-GPU results as kvdiag recorded them on a host with two H200s.

The recordings are in tests/fixtures/device/h200x2-ggml-llama-session2 (see its
README.md): two sweeps of ggml d99724f2 (GPU 0 only, then both GPUs) and two
scans of D2's hsk=256 case space (8 workers on GPU 0, then 8 on each GPU).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from kvdiag.engine.sweep.session import needs_gpu
from kvdiag.registry.loader import load_registry
from kvdiag.report.compare import compare_sweeps
from kvdiag.report.formats.table import TableFormat
from kvdiag.store.sweeps import load_sweep

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "fixtures" / "device" / "h200x2-ggml-llama-session2"
CONTROL_RACE = ("canary not compiled", "control could not run")


@pytest.fixture(scope="module")
def entries():
    return {e.id: e for e in load_registry(REPO / "registry").entries}


def scan_data(tag: str) -> dict:
    (path,) = DEVICE.glob(f"scan-*-{tag}.run.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["scan"]


def test_each_gpu_entry_names_the_gpu_its_worker_was_pinned_to(entries):
    one, two = load_sweep(DEVICE / "sweep-gpu0.json"), load_sweep(DEVICE / "sweep-gpu01.json")
    for sweep, allowed in ((one, {0}), (two, {0, 1})):
        used = set()
        for outcome in sweep.outcomes:
            device = outcome.device
            if needs_gpu(entries[outcome.entry_id]):
                assert device and device["index"] in allowed and device["uuid"].startswith("GPU-")
                used.add(device["index"])
                for attempt in outcome.attempts:      # the processes ran where the outcome says
                    assert attempt.device["uuid"] == device["uuid"]
            else:
                assert device is None
        assert used == allowed


def test_two_gpus_give_the_verdicts_of_one_and_the_table_names_the_gpu():
    one, two = load_sweep(DEVICE / "sweep-gpu0.json"), load_sweep(DEVICE / "sweep-gpu01.json")
    assert [(o.entry_id, o.verdict) for o in one.outcomes] == [(o.entry_id, o.verdict) for o in two.outcomes]
    assert {e.change for e in compare_sweeps(one, two).entries} == {"unchanged"}
    assert one.wall_s / two.wall_s > 1.7                    # 8.7 s against 5.0 s
    table = TableFormat().format(two).splitlines()
    assert table[2].split()[-1] == "GPU"
    d2 = next(line for line in table if line.startswith("D2 "))
    assert d2.split()[1] == "confirmed" and d2.split()[-1] == "1"


def test_the_scan_on_two_gpus_attributes_every_case_and_finds_the_same_shapes():
    one, two = scan_data("8068"), scan_data("249b")
    assert len(two["cases"]) == 132 and two["counts"]["confirmed"] == 60
    per_device = Counter(c["device"]["index"] for c in two["cases"].values())
    assert set(per_device) == {0, 1} and sum(per_device.values()) == 132
    assert {c["device"]["index"] for c in one["cases"].values()} == {0}
    # the one-GPU scan lost 11 cases to the control race since fixed: they are the only difference
    differ = {p for p in one["cases"] if one["cases"][p]["verdict"] != two["cases"][p]["verdict"]}
    assert len(differ) == 11
    for params in differ:
        assert one["cases"][params]["verdict"] == "inconclusive"
        assert any(text in one["cases"][params]["reason"] for text in CONTROL_RACE)
        assert two["cases"][params]["verdict"] == "not-reproduced"
