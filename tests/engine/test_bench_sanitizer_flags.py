"""benchmarks/bench_sanitizer_flags.py against the staged suite and the fake compute-sanitizer:
the plain run and each flag pair, what each row counts, a hang cut at the cap with its whole
group, and bad input as one line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import Scenarios  # noqa: E402
from test_discover import staged_build  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from process_checks import ended_and_reaped, wait_until  # noqa: E402


BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sanitizer_flags.py"


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_sanitizer_flags", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120)


def test_each_variant_runs_the_same_cases_and_counts_the_records_it_printed(tmp_path):
    kv = Scenarios(tmp_path / "kv")
    build, sanitizer = staged_build(kv), kv.sanitizer()
    out = tmp_path / "flags.json"
    done = run_bench("--build", str(build), "--tool", "racecheck", "--op", "SOFT_MAX", "--sanitizer", str(sanitizer),
                     "--variant", "device:0", "--variant", "no:1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    rows = report["variants"]
    assert list(rows) == ["plain", "device:0", "no:1"]
    assert rows["plain"]["errors"] is None and rows["plain"]["records_printed"] == 0
    # The staged SOFT_MAX prints its two cases' racecheck records; the fake tool counts each one.
    for name in ("device:0", "no:1"):
        row = rows[name]
        assert row["errors"] == row["records_printed"] > 0 and not row["cut"]
        assert "per_error_ms" in row
        argv_log = Path(row["log"]).read_text()
        assert "SOFT_MAX" in argv_log
    assert Path(rows["plain"]["log"]).parent == Path(rows["no:1"]["log"]).parent


def test_a_run_past_the_cap_is_cut_with_its_group(tmp_path):
    kv = Scenarios(tmp_path / "kv")
    build = kv.build("backend_ops_hangs")
    row = bench_module().run_once([str(build / "bin" / "test-backend-ops"), "test"], tmp_path / "hang.log", cap=2.0)
    assert row["cut"] and row["returncode"] is not None
    grandchild = int((build / "grandchild.pid").read_text())
    assert wait_until(lambda: ended_and_reaped(grandchild))        # the forked grandchild went with the group


@pytest.mark.parametrize("variant", ["device", "device:x", "loud:0", ":1"])
def test_a_malformed_variant_is_one_usage_line(tmp_path, variant):
    done = run_bench("--build", str(tmp_path), "--op", "ADD", "--variant", variant)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "expected BACKTRACE:LIMIT" in done.stderr


def test_a_build_without_the_program_is_one_line(tmp_path):
    done = run_bench("--build", str(tmp_path), "--op", "ADD")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "no test-backend-ops" in done.stderr
