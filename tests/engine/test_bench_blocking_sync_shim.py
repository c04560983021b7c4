"""benchmarks/shims/cuda_blocking_sync.c, against a staged CUDA driver: a test-backend-ops process
gets CU_CTX_SCHED_BLOCKING_SYNC on every device's primary context, any other process is left alone,
and a driver that fails says so in the log, never on the program's output."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench_shims import compiled_shim


pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")

# A stand-in for libcuda.so.1: two devices; each call is written to STAGED_DRIVER_LOG.
STAGED_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
static void say(const char * what, int a, unsigned b) {
    FILE * f = fopen(getenv("STAGED_DRIVER_LOG"), "a"); fprintf(f, "%s %d %u\n", what, a, b); fclose(f);
}
int cuInit(unsigned flags) { say("cuInit", 0, flags); return getenv("STAGED_INIT_FAILS") ? 3 : 0; }
int cuDeviceGetCount(int * n) { *n = 2; return 0; }
int cuDeviceGet(int * d, int i) { *d = 100 + i; return 0; }
int cuDevicePrimaryCtxSetFlags_v2(int d, unsigned flags) { say("setflags", d, flags); return 0; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("shim")
    shim = compiled_shim("cuda_blocking_sync", root)
    (root / "driver.c").write_text(STAGED_DRIVER)
    drivers = root / "driver"
    drivers.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(drivers / "libcuda.so.1"), str(root / "driver.c")],
                   check=True, timeout=120)
    return shim, drivers


def run_as(tmp_path: Path, built, name: str, **extra: str) -> tuple[subprocess.CompletedProcess, str, str]:
    shim, drivers = built
    program = tmp_path / name
    shutil.copy(shutil.which("true") or "/bin/true", program)
    shim_log, driver_log = tmp_path / "shim.log", tmp_path / "driver.log"
    env = {**os.environ, "LD_PRELOAD": str(shim), "LD_LIBRARY_PATH": str(drivers),
           "KVDIAG_BLOCKING_SYNC_LOG": str(shim_log), "STAGED_DRIVER_LOG": str(driver_log), **extra}
    done = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=60)
    read = lambda p: p.read_text() if p.exists() else ""  # noqa: E731
    return done, read(shim_log), read(driver_log)


def test_a_test_backend_ops_process_blocks_on_every_device(tmp_path, built):
    done, shim_log, driver_log = run_as(tmp_path, built, "test-backend-ops-launch")
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert driver_log.splitlines() == ["cuInit 0 0", "setflags 100 4", "setflags 101 4"]
    assert [line.split(" ", 1)[1] for line in shim_log.splitlines()] == [
        "blocking-sync device=0 status=0", "blocking-sync device=1 status=0"]


def test_any_other_process_is_left_alone(tmp_path, built):
    done, shim_log, driver_log = run_as(tmp_path, built, "compute-sanitizer")
    assert done.returncode == 0
    assert shim_log == "" and driver_log == ""


def test_the_name_to_match_can_be_changed(tmp_path, built):
    _, shim_log, driver_log = run_as(tmp_path, built, "my-program", KVDIAG_BLOCKING_SYNC_EXE="my-")
    assert "setflags 100 4" in driver_log and shim_log.count("status=0") == 2


def test_a_failing_driver_is_noted_and_nothing_is_set(tmp_path, built):
    done, shim_log, driver_log = run_as(tmp_path, built, "test-backend-ops", STAGED_INIT_FAILS="1")
    assert done.returncode == 0 and done.stderr == ""
    assert "setflags" not in driver_log
    assert shim_log.split(" ", 1)[1].strip() == "cuInit-failed device=-1 status=3"


def test_no_driver_at_all_is_noted(tmp_path, built):
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has a CUDA driver, which the shim would find")
    shim, _ = built
    done, shim_log, _ = run_as(tmp_path, (shim, tmp_path / "nowhere"), "test-backend-ops")
    assert done.returncode == 0
    assert shim_log.split(" ", 1)[1].strip() == "no-driver-entry-points device=-1 status=-1"
