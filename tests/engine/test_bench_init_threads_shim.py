"""benchmarks/shims/init_threads.c, against a stand-in program: a test-backend-ops process gets
KVDIAG_INIT_THREADS (default 1) from std::thread::hardware_concurrency(), so test-backend-ops' input filling
starts that many threads; any other process gets the library's answer; what it answered goes to a log, never
to the program's output. And bench_scan's `+initN` variant preloads it for that variant only."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench_shims import compiled_shim

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("c++") is None, reason="needs cc and c++")

# test-backend-ops' init_tensor_uniform in small: one std::async per hardware_concurrency() thread.
STAND_IN = r"""
#include <cstdio>
#include <future>
#include <set>
#include <thread>
#include <vector>
#include <mutex>
int main() {
    const unsigned n = std::thread::hardware_concurrency();
    std::set<std::thread::id> ids; std::mutex m;
    std::vector<std::future<void>> tasks;
    for (unsigned i = 0; i < n; i++) {
        tasks.push_back(std::async(std::launch::async, [&] { std::lock_guard<std::mutex> g(m); ids.insert(std::this_thread::get_id()); }));
    }
    for (auto & t : tasks) t.get();
    printf("%u %zu\n", n, ids.size());
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("init-threads")
    shim = compiled_shim("init_threads", root)
    (root / "stand_in.cpp").write_text(STAND_IN)
    program = root / "stand-in"
    subprocess.run(["c++", "-O1", "-pthread", "-o", str(program), str(root / "stand_in.cpp")], check=True, timeout=120)
    return shim, program


def run_as(tmp_path: Path, built, name: str, **extra: str) -> tuple[subprocess.CompletedProcess, str]:
    shim, stand_in = built
    program = tmp_path / name
    shutil.copy(stand_in, program)
    log = tmp_path / "shim.log"
    env = {**os.environ, "LD_PRELOAD": str(shim), "KVDIAG_INIT_THREADS_LOG": str(log), **extra}
    done = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=60)
    return done, log.read_text() if log.exists() else ""


def real_concurrency(tmp_path: Path, built) -> int:
    done = subprocess.run([str(built[1])], capture_output=True, text=True, timeout=60)
    return int(done.stdout.split()[0])


def test_a_test_backend_ops_process_fills_its_inputs_on_one_thread(tmp_path, built):
    done, log = run_as(tmp_path, built, "test-backend-ops-launch")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.split() == ["1", "1"]          # hardware_concurrency() 1, so one std::async thread
    assert log.split(" ", 2)[2].strip() == "test-backend-ops-launch: hardware_concurrency() = 1 (the shim's)"


def test_the_number_of_threads_can_be_asked_for(tmp_path, built):
    done, _ = run_as(tmp_path, built, "test-backend-ops", KVDIAG_INIT_THREADS="3")
    assert done.stdout.split() == ["3", "3"]


def test_any_other_process_gets_the_librarys_answer(tmp_path, built):
    done, log = run_as(tmp_path, built, "compute-sanitizer")
    n = real_concurrency(tmp_path, built)
    assert done.stdout.split()[0] == str(n)
    assert log.strip().endswith(f"compute-sanitizer: hardware_concurrency() = {n} (the library's)")


def test_the_name_to_match_can_be_changed(tmp_path, built):
    done, _ = run_as(tmp_path, built, "my-program", KVDIAG_INIT_THREADS_EXE="my-")
    assert done.stdout.split() == ["1", "1"]


def test_bench_scan_preloads_the_shim_for_an_init_variant_only(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "benchmarks" / "bench_scan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seen = []
    record = {"wall_s": 1.0, "sum_case_s": 1.0, "counts": {"confirmed": 0}, "devices": {},
              "cases": {"c": {"verdict": "not-reproduced", "device": {"index": 0}}}}

    def fake_run(argv, env=None, **kwargs):
        seen.append(env)
        if env.get("LD_PRELOAD"):
            Path(env["KVDIAG_INIT_THREADS_LOG"]).write_text(
                "pid 1 test-backend-ops: hardware_concurrency() = 1 (the shim's)\n"
                "pid 2 compute-sanitizer: hardware_concurrency() = 16 (the library's)\n")
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(record), stderr="")

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setattr(bench, "init_threads_shim", lambda: "/built/init_threads.so")
    monkeypatch.setattr(sys, "argv", ["bench_scan.py", "--build", "b", "--variant", "9@0", "--variant", "9@0+init1"])
    assert bench.main() == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [env.get("LD_PRELOAD") for env in seen] == [None, None, "/built/init_threads.so"]
    assert seen[2]["KVDIAG_INIT_THREADS"] == "1"
    assert "init_threads" not in rows[1]
    assert rows[2]["init_threads"]["threads"] == 1 and rows[2]["init_threads"]["processes_answered"] == 1


def test_bench_scan_builds_the_shim_once():
    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "benchmarks" / "bench_scan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    first = bench.init_threads_shim()
    assert Path(first).is_file() and bench.init_threads_shim() == first
