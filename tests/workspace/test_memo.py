"""The memo of slow, rarely changing inspections (environment, test-backend-ops probe):
data (JSON) with a format version, a kind and a key, never code."""

from __future__ import annotations

import json
import os

import pytest

from kvdiag.engine.verdict.target import BACKEND_OPS, ENVIRONMENT
from kvdiag.workspace.build import probe_backend_ops
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint
from kvdiag.workspace.host import Environment, HostInfo, ToolVersions, fingerprint_environment
from kvdiag.workspace.memo import CACHE_FORMAT, TEXT, Codec, binary_key, memoised

DATA = Codec(dump=lambda value: value, load=lambda data: data)     # JSON-native answers as they are


def _two_gpu_environment() -> Environment:
    devices = tuple(GpuDevice(index=i, name="NVIDIA H200", uuid=f"GPU-0d4134fc-10d5-59e4-1f21-00770000000{i}",
                              compute_capability=(9, 0), sm_count=132, total_memory_bytes=150_754_820_096,
                              pci_bus_id=f"00000000:1{i}:00.0") for i in range(2))
    devices += (GpuDevice(index=2, name="(unnamed)", uuid=None, compute_capability=None, sm_count=None,
                          total_memory_bytes=None, pci_bus_id=None),)
    gpu = GpuFingerprint(source="nvidia-smi", devices=devices, driver_version="580.95.05", driver_cuda_version="13.0",
                         runtime_version=None, visible_devices="0,1", notes=("pycuda: not importable", "cupy: none"))
    host = HostInfo(hostname="h200-node", os="Linux-6.8-x86_64", python="3.11.7", cpu=None, cpu_count=32)
    tools = ToolVersions(nvcc="13.0.88", compute_sanitizer="2025.3.1.0",
                         compute_sanitizer_path="/usr/local/cuda/bin/compute-sanitizer", nvcc_path=None)
    return Environment(host=host, gpu=gpu, tools=tools, kvdiag_version="0.1.1")


def _only_file(home):
    (path,) = (home / "cache").iterdir()
    return path


def test_an_answer_is_computed_once_per_key(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or {"gpu": "H200"}  # noqa: E731
    assert memoised(tmp_path, "environment", "k1", compute, DATA) == {"gpu": "H200"}
    assert memoised(tmp_path, "environment", "k1", compute, DATA) == {"gpu": "H200"}
    assert len(calls) == 1
    memoised(tmp_path, "environment", "k2", compute, DATA)
    assert len(calls) == 2


def test_an_answer_not_worth_keeping_is_recomputed(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or "no gpu"  # noqa: E731
    for _ in range(2):
        memoised(tmp_path, "environment", "k", compute, TEXT, keep=lambda value: value != "no gpu")
    assert len(calls) == 2


def test_a_rebuilt_binary_has_a_new_key(tmp_path):
    binary = tmp_path / "test-backend-ops"
    binary.write_text("v1")
    before = binary_key(binary)
    binary.write_text("v2 longer")
    os.utime(binary, ns=(1, 10**18))
    assert binary_key(binary) != before


def test_the_cache_file_is_json_naming_its_format_kind_and_key(tmp_path):
    memoised(tmp_path, "server-help", "k", lambda: "usage: llama-server", TEXT)
    path = _only_file(tmp_path)
    assert path.name == "server-help-k.json"
    assert json.loads(path.read_text()) == {"format": CACHE_FORMAT, "kind": "server-help", "key": "k",
                                            "value": "usage: llama-server"}


@pytest.mark.parametrize("content", [
    b"not json at all",
    b"\x80\x04\x95 a serialized Python object",
    b"[" * 100000,
    json.dumps({"format": "kvdiag-cache/0", "kind": "x", "key": "k", "value": 1}).encode(),
    json.dumps({"format": CACHE_FORMAT, "kind": "x", "key": "another key", "value": 1}).encode(),
    json.dumps({"format": CACHE_FORMAT, "kind": "other kind", "key": "k", "value": 1}).encode(),
    json.dumps({"format": CACHE_FORMAT, "kind": "x", "key": "k"}).encode(),
    json.dumps(["format", CACHE_FORMAT]).encode(),
], ids=["not-json", "binary", "deep", "old-format", "other-key", "other-kind", "no-value", "not-an-object"])
def test_a_cache_file_that_does_not_hold_this_answer_is_a_miss_and_is_rewritten(tmp_path, content):
    memoised(tmp_path, "x", "k", lambda: 1, DATA)
    path = _only_file(tmp_path)
    path.write_bytes(content)
    assert memoised(tmp_path, "x", "k", lambda: 2, DATA) == 2
    assert json.loads(path.read_text())["value"] == 2


def test_a_value_that_does_not_load_is_a_miss(tmp_path):
    memoised(tmp_path, "server-help", "k", lambda: "help", TEXT)
    path = _only_file(tmp_path)
    path.write_text(json.dumps({"format": CACHE_FORMAT, "kind": "server-help", "key": "k", "value": ["a list"]}))
    assert memoised(tmp_path, "server-help", "k", lambda: "fresh", TEXT) == "fresh"
    environment = {"format": CACHE_FORMAT, "kind": "environment", "key": "k", "value": {"host": {}}}
    (tmp_path / "cache" / "environment-k.json").write_text(json.dumps(environment))
    fresh = _two_gpu_environment()
    assert memoised(tmp_path, "environment", "k", lambda: fresh, ENVIRONMENT) == fresh


def test_the_memo_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KVDIAG_NO_CACHE", "1")
    calls = []
    for _ in range(2):
        memoised(tmp_path, "x", "k", lambda: calls.append(1), DATA)
    assert len(calls) == 2
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("which", ["two-h200", "this-machine"])
def test_an_environment_round_trips_exactly(tmp_path, which):
    environment = (_two_gpu_environment() if which == "two-h200"
                   else fingerprint_environment(log_dir=tmp_path / "logs", sanitizer=None))
    assert ENVIRONMENT.load(json.loads(json.dumps(ENVIRONMENT.dump(environment)))) == environment
    assert memoised(tmp_path, "environment", "k", lambda: environment, ENVIRONMENT) == environment
    assert memoised(tmp_path, "environment", "k", lambda: pytest.fail("not read back"), ENVIRONMENT) == environment


def test_a_backend_ops_probe_round_trips_exactly(tmp_path, fixture_build, log_dir):
    binary = fixture_build("lineinfo") / "bin" / "test-backend-ops"
    info = probe_backend_ops(binary, log_dir=log_dir)
    assert info.ops and info.help_text and info.modes
    assert memoised(tmp_path, "backend-ops", "k", lambda: info, BACKEND_OPS) == info
    again = memoised(tmp_path, "backend-ops", "k", lambda: pytest.fail("not read back"), BACKEND_OPS)
    assert again == info and isinstance(again.path, type(info.path)) and isinstance(again.ops, tuple)
