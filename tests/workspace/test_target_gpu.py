"""kvdiag.workspace.gpu: each source with fakes (modules in sys.modules, a fake nvidia-smi on PATH)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from target_helpers import write_exe
from kvdiag.workspace import gpu as G
from kvdiag.workspace.gpu import (
    GpuDevice,
    apply_visible_devices,
    cuda_version_str,
    fingerprint_gpu,
    format_pci_bus_id,
    format_uuid,
    read_proc_driver_version,
)

UUID_BYTES = bytes(range(16))
UUID_STR = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


@pytest.fixture(autouse=True)
def no_real_gpu(tmp_path, monkeypatch):
    """Whatever this machine has, the tests see only their fakes."""
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(G, "PROC_DRIVER_VERSION", tmp_path / "no-proc-driver-version")
    monkeypatch.setattr(G, "driver_api_version", lambda: None)


# --------------------------------------------------------------------------- fakes


def fake_pycuda(monkeypatch, devices, *, init_error: Exception | None = None):
    pkg = types.ModuleType("pycuda")
    drv = types.ModuleType("pycuda.driver")

    class device_attribute:
        MULTIPROCESSOR_COUNT = "MPC"

    class Device:
        def __init__(self, i):
            self.d = devices[i]

        @staticmethod
        def count():
            return len(devices)

        def name(self):
            return self.d["name"]

        def compute_capability(self):
            return self.d["cc"]

        def get_attribute(self, attr):
            assert attr == "MPC"
            return self.d["sm"]

        def total_memory(self):
            return self.d["mem"]

        def pci_bus_id(self):
            return self.d["pci"]

        def uuid(self):
            return UUID_BYTES

    def init():
        if init_error:
            raise init_error

    drv.init = init
    drv.get_version = lambda: (13, 0, 0)
    drv.get_driver_version = lambda: 13000
    drv.Device = Device
    drv.device_attribute = device_attribute
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)


H200 = {"name": "NVIDIA H200", "cc": (9, 0), "sm": 132, "mem": 150_000_000_000, "pci": "0000:19:00.0"}


def fake_cupy(monkeypatch, props_list):
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: len(props_list),
        getDeviceProperties=lambda i: props_list[i],
        driverGetVersion=lambda: 12090,
        runtimeGetVersion=lambda: 12040,
    )
    mod = types.ModuleType("cupy")
    mod.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", mod)


CUPY_PROPS = {
    "name": b"NVIDIA GeForce RTX 4090\x00\x00", "major": 8, "minor": 9, "multiProcessorCount": 128,
    "totalGlobalMem": 25_386_352_640, "uuid": UUID_BYTES, "pciBusID": 1, "pciDeviceID": 0, "pciDomainID": 0,
}

SMI_ROWS = (
    "0, NVIDIA H200, GPU-aaaaaaaa-0000-0000-0000-000000000000, 9.0, 143771, 00000000:19:00.0, 580.95.05\n"
    "1, NVIDIA H200, GPU-bbbbbbbb-0000-0000-0000-000000000000, 9.0, 143771, 00000000:3B:00.0, 580.95.05\n"
)


def fake_smi(tmp_path, monkeypatch, script: str) -> Path:
    bindir = tmp_path / "smi-bin"
    write_exe(bindir / "nvidia-smi", script)
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def smi_printing(rows: str) -> str:
    return "".join(f"echo '{ln}'\n" for ln in rows.splitlines())


# --------------------------------------------------------------------------- none


def test_nothing_available(log_dir):
    fp = fingerprint_gpu(log_dir=log_dir)
    assert fp.source == "none" and fp.devices == () and fp.available is False
    assert len(fp.notes) == 3
    assert fp.notes[0].startswith("pycuda not importable:")
    assert fp.notes[1].startswith("cupy not importable:")
    assert fp.notes[2].startswith("nvidia-smi not runnable:")
    assert fp.driver_version is None and fp.runtime_version is None
    assert json.loads(json.dumps(fp.to_dict()))["available"] is False


# --------------------------------------------------------------------------- pycuda


def test_pycuda(log_dir, monkeypatch, tmp_path):
    fake_pycuda(monkeypatch, [H200])
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                    "(dvs-builder@U16)  Thu Sep 11 2025\nGCC version:  gcc version 12.2.0\n")
    monkeypatch.setattr(G, "PROC_DRIVER_VERSION", proc)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fp = fingerprint_gpu(log_dir=log_dir)
    assert fp.source == "pycuda" and fp.notes == ()
    (dev,) = fp.devices
    assert dev == GpuDevice(index=0, name="NVIDIA H200", uuid=UUID_STR, compute_capability=(9, 0), sm_count=132,
                            total_memory_bytes=150_000_000_000, pci_bus_id="00000000:19:00.0")
    assert dev.cc_str == "9.0" and dev.arch == "sm_90"
    assert fp.driver_cuda_version == "13.0" and fp.runtime_version == "13.0"
    assert fp.driver_version == "580.95.05"
    assert fp.visible_devices == "0"


def test_pycuda_init_failure_falls_back_to_cupy(log_dir, monkeypatch):
    fake_pycuda(monkeypatch, [H200], init_error=RuntimeError("cuInit failed: no CUDA-capable device is detected"))
    fake_cupy(monkeypatch, [CUPY_PROPS])
    fp = fingerprint_gpu(log_dir=log_dir)
    assert fp.source == "cupy"
    assert fp.notes == ("pycuda: cuInit failed: cuInit failed: no CUDA-capable device is detected",)


def test_pycuda_without_devices_is_noted(log_dir, monkeypatch):
    fake_pycuda(monkeypatch, [])
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("pycuda",))
    assert fp.source == "none" and fp.notes == ("pycuda: no CUDA device visible",)


# --------------------------------------------------------------------------- cupy


def test_cupy(log_dir, monkeypatch):
    fake_cupy(monkeypatch, [CUPY_PROPS])
    fp = fingerprint_gpu(log_dir=log_dir)
    assert fp.source == "cupy"
    assert len(fp.notes) == 1 and fp.notes[0].startswith("pycuda not importable")
    (dev,) = fp.devices
    assert dev.name == "NVIDIA GeForce RTX 4090"
    assert dev.compute_capability == (8, 9) and dev.arch == "sm_89"
    assert dev.sm_count == 128 and dev.total_memory_bytes == 25_386_352_640
    assert dev.uuid == UUID_STR and dev.pci_bus_id == "00000000:01:00.0"
    assert fp.driver_cuda_version == "12.9" and fp.runtime_version == "12.4"


# Seen on an H200 (tests/fixtures/device/h200x2-ggml-session3/device-x2-call12.log): nvidia-smi
# says GPU-0d4134fc-10d5-59e4-1f21-0077caab442a, cupy's properties carried the bytes up to the
# zero byte only, and kvdiag recorded "0d4134fc10d559e41f21" and pinned processes with it.
ZERO_BYTE_UUID = bytes.fromhex("0d4134fc10d559e41f210077caab442a")


def test_cupy_uuid_cut_at_a_zero_byte_is_read_again_through_the_driver(log_dir, monkeypatch):
    fake_cupy(monkeypatch, [{**CUPY_PROPS, "uuid": ZERO_BYTE_UUID.split(b"\0")[0]}, CUPY_PROPS])
    asked = []
    monkeypatch.setattr(G, "driver_api_uuid", lambda i: asked.append(i) or ZERO_BYTE_UUID)
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("cupy",))
    assert [d.uuid for d in fp.devices] == ["GPU-0d4134fc-10d5-59e4-1f21-0077caab442a", UUID_STR]
    assert asked == [0]     # only the device whose bytes came back short


def test_cupy_uuid_cut_short_without_a_driver_answer_is_unknown_not_wrong(log_dir, monkeypatch):
    fake_cupy(monkeypatch, [{**CUPY_PROPS, "uuid": ZERO_BYTE_UUID[:10]}])
    monkeypatch.setattr(G, "driver_api_uuid", lambda i: None)
    (dev,) = fingerprint_gpu(log_dir=log_dir, prefer=("cupy",)).devices
    assert dev.uuid is None


def test_cupy_broken_device_count(log_dir, monkeypatch):
    fake_cupy(monkeypatch, [])

    def boom():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    sys.modules["cupy"].cuda.runtime.getDeviceCount = boom
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("cupy",))
    assert fp.source == "none"
    assert fp.notes == ("cupy: getDeviceCount failed: cudaErrorNoDevice: no CUDA-capable device is detected",)


# --------------------------------------------------------------------------- nvidia-smi


def test_nvidia_smi(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, smi_printing(SMI_ROWS))
    monkeypatch.setattr(G, "driver_api_version", lambda: "13.0")
    fp = fingerprint_gpu(log_dir=log_dir)
    assert fp.source == "nvidia-smi"
    assert len(fp.notes) == 2  # pycuda and cupy not importable
    assert [d.index for d in fp.devices] == [0, 1]
    d0 = fp.devices[0]
    assert d0.name == "NVIDIA H200" and d0.compute_capability == (9, 0) and d0.sm_count is None
    assert d0.total_memory_bytes == 143771 * 1024 * 1024
    assert d0.uuid == "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    assert fp.devices[1].pci_bus_id == "00000000:3B:00.0"
    assert fp.driver_version == "580.95.05" and fp.driver_cuda_version == "13.0"
    assert fp.runtime_version is None
    # the query went through the runner, with its logs
    assert (log_dir / "nvidia-smi-query.cmd.json").is_file()


def test_nvidia_smi_respects_cuda_visible_devices(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, smi_printing(SMI_ROWS))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("nvidia-smi",))
    (dev,) = fp.devices
    assert dev.index == 0 and dev.uuid.startswith("GPU-bbbbbbbb")
    assert fp.visible_devices == "GPU-bbbb"
    assert any("CUDA_VISIBLE_DEVICES='GPU-bbbb' applied" in n for n in fp.notes)


def test_nvidia_smi_hidden_by_cuda_visible_devices(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, smi_printing(SMI_ROWS))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("nvidia-smi",))
    assert fp.source == "none" and fp.notes[-1] == "nvidia-smi: no CUDA device visible"


def test_nvidia_smi_old_driver_without_compute_cap(tmp_path, log_dir, monkeypatch):
    rows = "0, Tesla V100-SXM2-16GB, GPU-cccccccc-0000-0000-0000-000000000000, 16160, 00000000:00:1E.0, 470.82.01"
    fake_smi(tmp_path, monkeypatch, f"""\
case "$1" in
  *compute_cap*) echo 'Field "compute_cap" is not a valid field to query.'; exit 2;;
esac
echo '{rows}'
""")
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("nvidia-smi",))
    (dev,) = fp.devices
    assert dev.name == "Tesla V100-SXM2-16GB" and dev.compute_capability is None and dev.arch is None
    assert fp.driver_version == "470.82.01"


def test_nvidia_smi_failure_is_noted(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                                    "NVIDIA driver.\"\nexit 9\n")
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("nvidia-smi",))
    assert fp.source == "none"
    assert fp.notes == ("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate "
                        "with the NVIDIA driver.",)


def test_nvidia_smi_not_applicable_values(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo '0, NVIDIA GH200 480GB, [N/A], 9.0, [N/A], 00000009:01:00.0, 580.95.05'\n")
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("nvidia-smi",))
    (dev,) = fp.devices
    assert dev.uuid is None and dev.total_memory_bytes is None
    assert dev.pci_bus_id == "00000009:01:00.0"


def test_unknown_source_and_order(tmp_path, log_dir, monkeypatch):
    fake_smi(tmp_path, monkeypatch, smi_printing(SMI_ROWS))
    fake_cupy(monkeypatch, [CUPY_PROPS])
    fp = fingerprint_gpu(log_dir=log_dir, prefer=("opencl", "nvidia-smi", "cupy"))
    assert fp.source == "nvidia-smi"
    assert fp.notes == ("unknown GPU source 'opencl' skipped",)


# --------------------------------------------------------------------------- helpers


def test_visible_devices_by_index_and_stop_at_invalid():
    devs = tuple(GpuDevice(index=i, name=f"g{i}", uuid=f"GPU-{i}{i}{i}", compute_capability=(9, 0), sm_count=None,
                           total_memory_bytes=None, pci_bus_id=None) for i in range(3))
    got, notes = apply_visible_devices(devs, "2,0,7,1")
    assert [d.name for d in got] == ["g2", "g0"] and [d.index for d in got] == [0, 1]
    assert any("CUDA_DEVICE_ORDER" in n for n in notes)
    got, notes = apply_visible_devices(devs, "1", "PCI_BUS_ID")
    assert [d.name for d in got] == ["g1"] and not any("CUDA_DEVICE_ORDER" in n for n in notes)
    got, notes = apply_visible_devices(devs, "MIG-abc")
    assert got == devs and "MIG" in notes[0]
    assert apply_visible_devices(devs, None) == (devs, ())


@pytest.mark.parametrize("value,expected", [
    (13000, "13.0"), (12040, "12.4"), (11080, "11.8"), ((13, 0, 0), "13.0"), ("13.0", "13.0"), (0, None),
    (None, None),
])
def test_cuda_version_str(value, expected):
    assert cuda_version_str(value) == expected


def test_format_uuid_and_pci():
    assert format_uuid(UUID_BYTES) == UUID_STR
    assert format_uuid("000102030405060708090a0b0c0d0e0f") == UUID_STR
    assert format_uuid("GPU-abc") == "GPU-abc" and format_uuid(None) is None and format_uuid(b"") is None
    assert format_uuid(UUID_BYTES[:10]) is None      # raw bytes that are not 16 name no GPU
    assert format_pci_bus_id("0000:19:00.0") == "00000000:19:00.0"
    assert format_pci_bus_id("00000000:3b:00.0") == "00000000:3B:00.0"
    assert format_pci_bus_id(domain=0, bus=0x19, device=0) == "00000000:19:00.0"
    assert format_pci_bus_id(None) is None


def test_proc_driver_version_formats(tmp_path):
    p = tmp_path / "v"
    p.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n")
    assert read_proc_driver_version(p) == "550.54.14"
    p.write_text("garbage\n")
    assert read_proc_driver_version(p) is None
    assert read_proc_driver_version(tmp_path / "missing") is None
