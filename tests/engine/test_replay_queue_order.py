"""benchmarks/replay_queue_order.py on the recorded discoveries: session 27's order against the cost order
(an estimate of what the order alone costs), session 28's run already in the cost order, bad input as one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_module import load_benchmark  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "replay_queue_order.py"
DEVICE = REPO / "tests" / "fixtures" / "device"


@pytest.fixture(scope="module")
def replay():
    return load_benchmark("replay_queue_order")


def test_session_27s_order_cost_90_s_that_the_cost_order_would_not_have(replay):
    got = replay.replay_orders(replay.load(DEVICE / "h100-session27" / "whole-discover.json.gz"))
    assert got == {"processes": 559, "slots": 16, "recorded_order_s": 1032.6, "cost_order_s": 942.7,
                   "perfect_packing_s": 935.8}


def test_session_28_ran_in_the_cost_order_and_the_replay_comes_near_its_wall(replay):
    doc = replay.load(DEVICE / "h100-session28" / "discover-mps-j16.json.gz")
    got = replay.replay_orders(doc)
    assert got["recorded_order_s"] == got["cost_order_s"] == 194.3       # the recorded order is the cost order
    assert abs(got["recorded_order_s"] - doc["wall_s"]) < 0.05 * doc["wall_s"]


def test_a_spared_case_is_no_case_of_the_listing_process(replay):
    doc = {"cases": [{"tool": "synccheck", "op": "A", "params": "a", "log": "/l/synccheck-00001.stdout.log"},
                     {"tool": "racecheck", "op": "A", "params": "a", "log": "/l/synccheck-00001.stdout.log"},
                     {"tool": "racecheck", "op": "A", "params": "b", "log": "/l/racecheck-00002.stdout.log"}]}
    assert replay.process_cases(doc) == {"synccheck-00001": ("a",), "racecheck-00002": ("b",)}


def test_a_listing_unit_releases_its_ops_racecheck_to_the_front(replay):
    queue = [{"op": "A", "wall_s": 1.0}, {"op": "B", "wall_s": 5.0}, {"op": "C", "wall_s": 5.0}]
    # one slot: A (1 s), then A's racecheck (10 s) before B and C, then B, C
    assert replay.replay(queue, {"A": [10.0]}, slots=1) == 21.0
    assert replay.replay(queue, {"A": [10.0]}, slots=2) == 11.0


@pytest.mark.parametrize("content", ["{not json", '{"processes": [{"tool": "x"}]}'])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content):
    bad = tmp_path / "d.json"
    bad.write_text(content)
    done = subprocess.run([sys.executable, str(BENCH), str(bad)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
