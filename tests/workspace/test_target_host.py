"""kvdiag.workspace.host: tool versions, host info, the environment key."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

import kvdiag
from target_helpers import write_exe
from kvdiag.workspace import gpu as G
from kvdiag.workspace import host as H
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint
from kvdiag.workspace.host import (
    Environment,
    HostInfo,
    ToolVersions,
    cpu_model,
    fingerprint_environment,
    parse_nvcc_version,
)

NVCC_13 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
SANITIZER = """\
NVIDIA (R) Compute Sanitizer
Copyright (c) 2020-2025 NVIDIA Corporation
Version 2025.3.1.0 (build 36398583) (public-release)
"""


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No real GPU source, no real CUDA tools: only what a test puts in tmp_path/bin."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "KVDIAG_COMPUTE_SANITIZER", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(H, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(G, "PROC_DRIVER_VERSION", tmp_path / "no-proc")
    monkeypatch.setattr(G, "driver_api_version", lambda: None)
    return bindir


def cat_script(text: str) -> str:
    return "".join(f"echo '{ln}'\n" for ln in text.splitlines())


def test_parse_nvcc_version():
    assert parse_nvcc_version(NVCC_13) == "13.0.88"
    assert parse_nvcc_version("Cuda compilation tools, release 11.8, V11.8.89") == "11.8.89"
    assert parse_nvcc_version("Cuda compilation tools, release 12.4") == "12.4"
    assert parse_nvcc_version("bash: nvcc: command not found") is None


def test_fingerprint_with_fake_tools(isolated, log_dir, monkeypatch):
    write_exe(isolated / "nvcc", cat_script(NVCC_13))
    write_exe(isolated / "compute-sanitizer", cat_script(SANITIZER))
    env = fingerprint_environment(log_dir=log_dir, sanitizer=None)
    assert env.tools.nvcc == "13.0.88"
    assert env.tools.nvcc_path == str(isolated / "nvcc")
    assert env.tools.compute_sanitizer == "2025.3.1.0"
    assert env.tools.compute_sanitizer_path == str(isolated / "compute-sanitizer")
    assert env.gpu.source == "none" and len(env.gpu.notes) == 3
    assert env.kvdiag_version == kvdiag.__version__
    doc = json.loads(json.dumps(env.to_dict()))
    assert doc["key"] == env.key() and doc["tools"]["nvcc"] == "13.0.88"


def test_explicit_sanitizer_path(isolated, tmp_path, log_dir):
    san = write_exe(tmp_path / "elsewhere" / "compute-sanitizer", cat_script(SANITIZER.replace("3.1.0", "2.0.0")))
    tools = H.tool_versions(log_dir=log_dir, sanitizer=san)
    assert tools.compute_sanitizer == "2025.2.0.0" and tools.compute_sanitizer_path == str(san)
    assert tools.nvcc is None and tools.nvcc_path is None


def test_missing_tools_are_none(isolated, tmp_path, log_dir, monkeypatch):
    # find_sanitizer also looks in fixed places and installed wheels: not this test's business
    monkeypatch.setattr(H, "find_sanitizer", lambda explicit=None: None)
    tools = H.tool_versions(log_dir=log_dir, sanitizer=tmp_path / "gone" / "compute-sanitizer")
    assert tools.nvcc is None and tools.compute_sanitizer is None
    assert tools.compute_sanitizer_path.endswith("gone/compute-sanitizer")
    assert H.tool_versions(log_dir=log_dir, sanitizer=None) == ToolVersions(None, None, None, None)


def test_nvcc_found_under_cuda_home(isolated, tmp_path, log_dir, monkeypatch):
    home = tmp_path / "cuda-13.0"
    write_exe(home / "bin" / "nvcc", cat_script(NVCC_13))
    monkeypatch.setenv("CUDA_HOME", str(home))
    tools = H.tool_versions(log_dir=log_dir, sanitizer=None)
    assert tools.nvcc == "13.0.88" and tools.nvcc_path == str(home / "bin" / "nvcc")


def test_cpu_model(tmp_path):
    p = tmp_path / "cpuinfo"
    p.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert cpu_model(p) == "AMD EPYC 9654 96-Core Processor"
    p.write_text("processor\t: 0\nCPU part\t: 0xd4f\nHardware\t: NVIDIA Grace\n")
    assert cpu_model(p) == "NVIDIA Grace"
    assert isinstance(cpu_model(tmp_path / "missing"), (str, type(None)))


def test_host_info():
    h = H.host_info()
    assert isinstance(h, HostInfo)
    assert h.python.count(".") == 2 and h.os and h.hostname
    assert h.cpu_count is None or h.cpu_count >= 1


def make_env(**changes) -> Environment:
    dev = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-1", compute_capability=(9, 0), sm_count=132,
                    total_memory_bytes=1, pci_bus_id="00000000:19:00.0")
    gpu = GpuFingerprint(source="nvidia-smi", devices=(dev,), driver_version="580.95.05",
                         driver_cuda_version="13.0", runtime_version=None, visible_devices=None, notes=())
    tools = ToolVersions(nvcc="13.0.88", compute_sanitizer="2025.3.1.0", compute_sanitizer_path="/x")
    host = HostInfo(hostname="a", os="Linux", python="3.11.7", cpu="cpu", cpu_count=16)
    env = Environment(host=host, gpu=gpu, tools=tools, kvdiag_version="0.1.0")
    for field, value in changes.items():
        part, _, attr = field.partition("__")
        env = dataclasses.replace(env, **{part: dataclasses.replace(getattr(env, part), **{attr: value})})
    return env


def test_key_is_stable_and_ignores_the_irrelevant():
    base = make_env()
    assert base.key() == make_env().key()
    assert len(base.key()) == 16 and int(base.key(), 16) >= 0
    # host name, paths, notes, uuids, the GPU source do not change the key
    assert make_env(host__hostname="b").key() == base.key()
    assert make_env(tools__compute_sanitizer_path="/y").key() == base.key()
    assert make_env(gpu__notes=("n",)).key() == base.key()
    assert dataclasses.replace(base, kvdiag_version="9").key() == base.key()


@pytest.mark.parametrize("change", [
    {"gpu__driver_version": "580.159.04"},
    {"gpu__driver_cuda_version": "13.1"},
    {"gpu__runtime_version": "13.0"},
    {"tools__nvcc": "13.1.10"},
    {"tools__compute_sanitizer": "2025.4.0.0"},
    {"gpu__devices": ()},
    {"gpu__devices": (GpuDevice(0, "NVIDIA H100", None, (9, 0), None, None, None),)},
])
def test_key_changes_with_toolkit_driver_or_gpu(change):
    assert make_env(**change).key() != make_env().key()
