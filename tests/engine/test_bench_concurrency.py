"""benchmarks/bench_concurrency.py: its readers of /proc/stat and nvidia-smi, its speedups, copies
run at once and cut at the cap with their whole groups, and bad input as one line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_concurrency.py"
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


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
    stat = Path(f"/proc/{grandchild}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in ([], ["--", str(tmp_path / "absent")]):
        done = run_bench(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
