"""On a GPU: the launch probe's interposers (taken out of the patch) in front of the real CUDA runtime.

tests/scenarios/launch_probe/kernels.cu is built as a shared library with the shared runtime, as
libggml-cuda.so is, and launches one template kernel with `<<<>>>` and one with cudaLaunchKernelEx
(ggml's PDL path on Hopper). The executable is linked as kvdiag links the probe's test-backend-ops
(-rdynamic). What must hold where the real program will run: both launches are named, demangled,
before they run, with the shared memory each holds (static, dynamic); the kernels still run; and
under compute-sanitizer the same (the tool hooks the driver, the probe the runtime).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gpu_checks import real_sanitizer
from launch_probe_build import SCENARIO, build_main

pytestmark = pytest.mark.gpu
EXPECTED = ["kvdiag-launch: void tile_kernel<256, 4, false>(float*)  [kvdiag-smem 256+0]",
            "kvdiag-launch: void ex_kernel<64>(float*)  [kvdiag-smem 0+128]", "launched both"]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    real_sanitizer()
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        pytest.skip("nvcc is not installed")
    out = tmp_path_factory.mktemp("launch-probe-gpu")
    library = out / "libkern.so"
    subprocess.run([nvcc, "-Xcompiler", "-fPIC", "-shared", "-cudart", "shared", "-o", str(library),
                    str(SCENARIO / "kernels.cu")], check=True)
    return build_main(out, library)


def test_both_launch_paths_are_named_before_they_run(program):
    out = subprocess.run([str(program)], capture_output=True, text=True, check=True,
                         env={**os.environ, "KVDIAG_PRINT_LAUNCHES": "1"}).stdout
    assert out.splitlines() == EXPECTED


def test_under_synccheck_the_launches_are_named_and_the_tool_reports_clean(program):
    san = real_sanitizer()
    result = subprocess.run([str(san), "--tool", "synccheck", str(program)], capture_output=True, text=True,
                            env={**os.environ, "KVDIAG_PRINT_LAUNCHES": "1"})
    lines = [line for line in result.stdout.splitlines() if not line.startswith("=========")]
    assert lines == EXPECTED, result.stdout + result.stderr
    assert "ERROR SUMMARY: 0 errors" in result.stdout
