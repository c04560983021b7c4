"""The launch probe's interposers, as the patch adds them to test-backend-ops, against a stand-in CUDA runtime.

tests/scenarios/launch_probe/README.md says what each stand-in is. The executable holds exactly the
patch's added block (tests/launch_probe_build.py reads it out of the patch file), so what is tested
here is the code the device compiles: it forwards every launch to the runtime, and with
KVDIAG_PRINT_LAUNCHES prints the demangled kernel first, named through cuKernelGetName for a
kernel handle (nvcc 13's `<<<>>>`) and cudaFuncGetName for a host stub (cudaLaunchKernelEx), with the
shared memory it holds: the kernel's static bytes (cuKernelGetAttribute on the context's device, or
cudaFuncGetAttributes; "?" where the driver cannot say) and the launch's dynamic bytes; a cuBLAS call,
whose kernels the probe cannot see, prints its name with "?+?" and reaches cuBLAS with every argument.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from launch_probe_build import SCENARIO, build_main

GEMM = "real cublasGemmEx 0x10 1 0 3 4 5 0x20 0x30 2 6 0x40 2 7 0x50 0x60 0 8 68 -1"
pytestmark = pytest.mark.skipif(not (shutil.which("cc") and shutil.which("c++")), reason="needs cc and c++")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("launch-probe")

    def lib(name, sources, *flags):
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out / name), *[str(SCENARIO / s) for s in sources],
                        f"-Wl,-soname,{name}", *flags], check=True)

    lib("libcuda.so.1", ["fake_cuda.c"])
    lib("libcudart.so.13", ["fake_cudart.c"], f"-Wl,--version-script={SCENARIO / 'fake_cudart.map'}")
    lib("libcublas.so.13", ["fake_cublas.c"])
    lib("libfakekern.so", ["fake_kern.c"], f"-L{out}", "-l:libcudart.so.13", "-l:libcuda.so.1", "-l:libcublas.so.13",
        f"-Wl,-rpath,{out}")
    return build_main(out, out / "libfakekern.so")


def run(program, **env):
    return subprocess.run([str(program)], capture_output=True, text=True, env={**os.environ, **env}, check=True).stdout


def test_with_the_variable_each_launch_is_named_then_forwarded(program):
    assert run(program, KVDIAG_PRINT_LAUNCHES="1").splitlines() == [
        "kvdiag-launch: void tile_kernel<256, 4, false>(float*)  [kvdiag-smem 1024+128]",
        "real __cudaLaunchKernel grid 7 block 32 shmem 128",
        "kvdiag-launch: unsized_kernel()  [kvdiag-smem ?+0]",
        "real __cudaLaunchKernel grid 7 block 32 shmem 0",
        "kvdiag-launch: void ex_kernel<64>(float*)  [kvdiag-smem 48+256]",
        "real cudaLaunchKernelExC shmem 256",
        "kvdiag-launch: cublasGemmEx  [kvdiag-smem ?+?]",
        GEMM,
    ]


def test_without_it_launches_are_only_forwarded(program):
    env = {k: v for k, v in os.environ.items() if k != "KVDIAG_PRINT_LAUNCHES"}
    out = subprocess.run([str(program)], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines() == ["real __cudaLaunchKernel grid 7 block 32 shmem 128",
                                "real __cudaLaunchKernel grid 7 block 32 shmem 0", "real cudaLaunchKernelExC shmem 256",
                                GEMM]
