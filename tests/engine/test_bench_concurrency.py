"""benchmarks/bench_concurrency.py: its readers of /proc/stat and nvidia-smi, its speedups, copies
run at once and cut at the cap with their whole groups, and bad input as one line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_concurrency.py"
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from process_checks import ended_and_reaped, wait_until  # noqa: E402


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_concurrency", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120)


def test_cpu_jiffies_count_idle_and_iowait_as_not_busy():
    busy, total = bench_module().cpu_jiffies("cpu  100 5 50 800 40 3 2 0 0 0")
    assert (busy, total) == (160, 1000)


def test_a_gpu_sample_reads_percent_and_mib_and_refuses_what_it_cannot_read():
    module = bench_module()
    assert module.gpu_sample("94, 10395") == (94.0, 10395.0)
    assert module.gpu_sample("[N/A], 10395") is None
    assert module.gpu_sample("") is None


def test_copies_start_with_one_and_are_whole_numbers():
    module = bench_module()
    assert module.parse_copies("1,4,9") == [1, 4, 9]
    for bad in ("4,9", "1,x", "", "1,0"):
        with pytest.raises(Exception):
            module.parse_copies(bad)


def test_speedup_is_copies_times_the_single_wall_over_this_wall_and_absent_for_a_cut_count():
    rows = bench_module().with_speedups([
        {"copies": 1, "wall_s": 6.23, "cut": 0}, {"copies": 9, "wall_s": 32.67, "cut": 0},
        {"copies": 16, "wall_s": 100.0, "cut": 3}, {"copies": 32, "skipped": "an earlier count was cut"}])
    assert rows[1]["speedup"] == pytest.approx(1.72, abs=0.01) and rows[1]["efficiency"] == pytest.approx(0.19, abs=0.01)
    assert "speedup" not in rows[2] and "speedup" not in rows[3]


def test_copies_run_at_once_and_a_count_cut_at_the_cap_kills_its_groups_and_skips_the_larger(tmp_path):
    """Three copies of a 1 s sleep end in about 1 s together; a hang is cut at the cap with the child
    it forked into its own session's group, and the larger count is not run."""
    out = tmp_path / "c.json"
    done = run_bench("--copies", "1,3", "--cap", "20", "--out", str(out), "--", sys.executable, "-c",
                     "import time; time.sleep(1)")
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["copies"] for r in rows] == [1, 3] and all(r["cut"] == 0 for r in rows)
    assert rows[1]["wall_s"] < 2 * rows[0]["wall_s"] + 1.0     # at once, not one after the other
    hung = tmp_path / "h.json"
    pidfile = tmp_path / "grandchild.pid"
    done = run_bench("--copies", "1,2", "--cap", "1.5", "--out", str(hung), "--", sys.executable, "-c",
                     "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
                     f"time.sleep(60)']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    assert done.returncode == 0, done.stderr
    rows = json.loads(hung.read_text())["rows"]
    assert rows[0]["cut"] == 1 and "skipped" in rows[1]
    grandchild = int(pidfile.read_text())
    assert wait_until(lambda: ended_and_reaped(grandchild))      # killed with its copy's group, and reaped


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    """nvidia-cuda-mps-control on PATH is the scenario program that journals what it was told."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-cuda-mps-control").symlink_to(SCENARIOS / "fake_mps_control.py")
    journal = tmp_path / "journal.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_JOURNAL", str(journal))
    return journal


def test_the_mps_arm_starts_a_daemon_of_its_own_that_its_copies_find_and_tells_it_to_quit(tmp_path, fake_mps):
    out, seen = tmp_path / "m.json", tmp_path / "seen"
    seen.mkdir()
    done = run_bench("--arms", "contexts,mps", "--copies", "1,2", "--cap", "20", "--out", str(out), "--",
                     sys.executable, "-c", "import os, uuid; open(os.path.join(" + repr(str(seen)) + ", uuid.uuid4().hex)"
                     ", 'w').write(os.environ.get('CUDA_MPS_PIPE_DIRECTORY', 'none'))")
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert list(report["arms"]) == ["contexts", "mps"] and report["rows"] == report["arms"]["contexts"]["rows"]
    pipe = report["arms"]["mps"]["mps"]["pipe"]
    assert pipe.endswith("/mps/pipe") and report["arms"]["mps"]["mps"]["quit_rc"] == 0
    assert fake_mps.read_text().splitlines() == [f"started {pipe}", f"quit {pipe}"]
    found = Counter(p.read_text() for p in seen.iterdir())
    assert found == {"none": 3, pipe: 3}                 # 1 + 2 copies in each arm; only the mps arm's see it
    assert "contexts:" in done.stdout and "mps:" in done.stdout


def test_a_daemon_that_does_not_start_keeps_the_other_arm_and_exits_2(tmp_path, fake_mps, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    out = tmp_path / "m.json"
    done = run_bench("--arms", "contexts,mps", "--copies", "1", "--out", str(out), "--", "true")
    assert done.returncode == 2
    assert done.stderr.strip() == ("bench_concurrency: no MPS arm: nvidia-cuda-mps-control -d exited 1: "
                                   "An instance of this daemon is already running")
    report = json.loads(out.read_text())
    assert report["arms"]["contexts"]["rows"][0]["cut"] == 0 and report["arms"]["mps"]["rows"] == []
    assert not fake_mps.exists() or "quit" not in fake_mps.read_text()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in ([], ["--", str(tmp_path / "absent")]):
        done = run_bench(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    done = run_bench("--arms", "mps,mps", "--", "true")          # argparse's usage, then the one line that says why
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith(
        "'mps,mps': expected one or both of contexts, mps, e.g. contexts,mps")
