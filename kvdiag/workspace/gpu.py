"""The GPU fingerprint: which devices, which driver, which CUDA runtime.

Sources are tried in order (pycuda, cupy, nvidia-smi by default); the first that
reports at least one device wins. A source that fails is noted, never raised.
"""

from __future__ import annotations

import csv
import ctypes
import ctypes.util
import importlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.proc.runner import CommandNotFound, run_command

SOURCES = ("pycuda", "cupy", "nvidia-smi")
NVIDIA_SMI_TIMEOUT_S = 30.0
NVIDIA_SMI_FIELDS = ("index", "name", "uuid", "compute_cap", "memory.total", "pci.bus_id", "driver_version")
# The kernel driver's version, readable without running anything (Linux).
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "unknown"}


@dataclass(frozen=True)
class GpuDevice:
    index: int  # the CUDA ordinal in this process (after CUDA_VISIBLE_DEVICES)
    name: str
    uuid: str | None  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    compute_capability: tuple[int, int] | None
    sm_count: int | None
    total_memory_bytes: int | None
    pci_bus_id: str | None  # "00000000:19:00.0", nvidia-smi's form whatever the source

    @property
    def cc_str(self) -> str | None:
        if self.compute_capability is None:
            return None
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def arch(self) -> str | None:
        if self.compute_capability is None:
            return None
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "compute_capability": self.cc_str,
            "arch": self.arch,
            "sm_count": self.sm_count,
            "total_memory_bytes": self.total_memory_bytes,
            "pci_bus_id": self.pci_bus_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GpuDevice":
        """The device :meth:`to_dict` wrote (``arch`` is derived again)."""
        cc = data["compute_capability"]
        major, minor = (int(part) for part in cc.split(".")) if cc is not None else (None, None)
        return cls(index=int(data["index"]), name=str(data["name"]), uuid=data["uuid"],
                   compute_capability=(major, minor) if cc is not None else None, sm_count=data["sm_count"],
                   total_memory_bytes=data["total_memory_bytes"], pci_bus_id=data["pci_bus_id"])


@dataclass(frozen=True)
class GpuFingerprint:
    source: str  # "pycuda" | "cupy" | "nvidia-smi" | "none"
    devices: tuple[GpuDevice, ...]
    driver_version: str | None  # the kernel driver, e.g. "580.95.05"
    driver_cuda_version: str | None  # the CUDA version the driver supports, e.g. "13.0"
    runtime_version: str | None  # CUDA runtime (cupy) or the CUDA pycuda was built with, e.g. "13.0"
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as set
    notes: tuple[str, ...]

    @property
    def available(self) -> bool:
        return bool(self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "available": self.available,
            "devices": [d.to_dict() for d in self.devices],
            "driver_version": self.driver_version,
            "driver_cuda_version": self.driver_cuda_version,
            "runtime_version": self.runtime_version,
            "visible_devices": self.visible_devices,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GpuFingerprint":
        """The fingerprint :meth:`to_dict` wrote (``available`` is derived again)."""
        return cls(source=str(data["source"]), devices=tuple(GpuDevice.from_dict(d) for d in data["devices"]),
                   driver_version=data["driver_version"], driver_cuda_version=data["driver_cuda_version"],
                   runtime_version=data["runtime_version"], visible_devices=data["visible_devices"],
                   notes=tuple(str(n) for n in data["notes"]))


class _Unavailable(Exception):
    """A source cannot be used; the message is the note."""


@dataclass
class _Partial:
    devices: list[GpuDevice]
    driver_version: str | None = None
    driver_cuda_version: str | None = None
    runtime_version: str | None = None


# --------------------------------------------------------------------------- formatting


def cuda_version_str(value: Any) -> str | None:
    """13000 -> "13.0", 12040 -> "12.4", (13, 0, 0) -> "13.0", "13.0" -> "13.0"."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        if len(value) >= 2:
            return f"{int(value[0])}.{int(value[1])}"
        return str(int(value[0])) if value else None
    if isinstance(value, int):
        if value <= 0:
            return None
        return f"{value // 1000}.{(value % 1000) // 10}"
    text = str(value).strip()
    return text or None


def format_uuid(value: Any) -> str | None:
    """16 raw bytes (or their hex) -> "GPU-8-4-4-4-12"; strings that already look right are kept.

    Raw bytes that are not 16 are no UUID: cupy hands the driver's 16 bytes over as a C
    string, cut at the first zero byte (seen on an H200: GPU-0d4134fc-10d5-59e4-1f21-0077…
    came back as 10 bytes). None then, never a shorter identifier that names no GPU."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) != 16:
            return None
        h = raw.hex()
    else:
        text = str(value).strip()
        if not text:
            return None
        if text.upper().startswith(("GPU-", "MIG-")):
            return text
        h = text.replace("-", "").lower()
        if not re.fullmatch(r"[0-9a-f]{32}", h):
            return text
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def format_pci_bus_id(value: Any = None, *, domain: int | None = None, bus: int | None = None,
                      device: int | None = None, function: int = 0) -> str | None:
    """A PCI address in nvidia-smi's form ``DDDDDDDD:BB:DD.F`` (from a string, or from numbers)."""
    if value is not None:
        m = re.fullmatch(r"\s*(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F])\s*", str(value))
        if not m:
            text = str(value).strip()
            return text or None
        domain = int(m.group(1) or "0", 16)
        bus, device, function = int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16)
    if bus is None or device is None:
        return None
    return f"{domain or 0:08X}:{bus:02X}:{device:02X}.{function:X}"


def _na(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in _NA else value


def _attempt(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


# --------------------------------------------------------------------------- sources


def _from_pycuda(*, log_dir: Path) -> _Partial:
    try:
        cuda = importlib.import_module("pycuda.driver")
    except Exception as exc:  # ImportError, but also a broken build of pycuda
        raise _Unavailable(f"pycuda not importable: {exc}") from None
    try:
        cuda.init()
    except Exception as exc:
        raise _Unavailable(f"pycuda: cuInit failed: {exc}") from None
    attr = _attempt(lambda: cuda.device_attribute.MULTIPROCESSOR_COUNT)
    devices = []
    for i in range(cuda.Device.count()):
        dev = cuda.Device(i)
        cc = _attempt(lambda: tuple(int(x) for x in dev.compute_capability()))
        uuid_fn = getattr(dev, "uuid", None)
        devices.append(
            GpuDevice(
                index=i,
                name=str(dev.name()).strip(),
                uuid=format_uuid(_attempt(uuid_fn)) if callable(uuid_fn) else None,
                compute_capability=cc if cc and len(cc) == 2 else None,
                sm_count=_attempt(lambda: int(dev.get_attribute(attr))) if attr is not None else None,
                total_memory_bytes=_attempt(lambda: int(dev.total_memory())),
                pci_bus_id=format_pci_bus_id(_attempt(dev.pci_bus_id)),
            )
        )
    return _Partial(
        devices=devices,
        driver_cuda_version=cuda_version_str(_attempt(cuda.get_driver_version)),
        runtime_version=cuda_version_str(_attempt(cuda.get_version)),
    )


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    return str(value).strip()


def _from_cupy(*, log_dir: Path) -> _Partial:
    try:
        cupy = importlib.import_module("cupy")
        runtime = cupy.cuda.runtime
    except Exception as exc:
        raise _Unavailable(f"cupy not importable: {exc}") from None
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:
        raise _Unavailable(f"cupy: getDeviceCount failed: {exc}") from None
    devices = []
    for i in range(count):
        props = runtime.getDeviceProperties(i)
        major, minor = props.get("major"), props.get("minor")
        devices.append(
            GpuDevice(
                index=i,
                name=_text(props.get("name", "")),
                uuid=format_uuid(props.get("uuid")) or format_uuid(driver_api_uuid(i)),
                compute_capability=(int(major), int(minor)) if major is not None and minor is not None else None,
                sm_count=_attempt(lambda: int(props["multiProcessorCount"])),
                total_memory_bytes=_attempt(lambda: int(props["totalGlobalMem"])),
                pci_bus_id=_attempt(lambda: format_pci_bus_id(
                    domain=int(props.get("pciDomainID", 0)),
                    bus=int(props["pciBusID"]),
                    device=int(props["pciDeviceID"]),
                )),
            )
        )
    return _Partial(
        devices=devices,
        driver_cuda_version=cuda_version_str(_attempt(runtime.driverGetVersion)),
        runtime_version=cuda_version_str(_attempt(runtime.runtimeGetVersion)),
    )


def _run_smi(fields: Sequence[str], log_dir: Path, name: str):
    return run_command(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        timeout=NVIDIA_SMI_TIMEOUT_S,
        log_dir=log_dir,
        name=name,
        env_overrides={"LC_ALL": "C"},
    )


def _from_nvidia_smi(*, log_dir: Path) -> _Partial:
    fields = list(NVIDIA_SMI_FIELDS)
    try:
        result = _run_smi(fields, log_dir, "nvidia-smi-query")
        if result.returncode != 0 and not result.timed_out and "compute_cap" in result.combined_text():
            # drivers before 510 do not know the compute_cap field
            fields.remove("compute_cap")
            result = _run_smi(fields, log_dir, "nvidia-smi-query-nocc")
    except CommandNotFound as exc:
        raise _Unavailable(f"nvidia-smi not runnable: {exc}") from None
    if result.timed_out:
        raise _Unavailable(f"nvidia-smi timed out after {NVIDIA_SMI_TIMEOUT_S:g} s")
    if result.returncode != 0:
        first = next((ln.strip() for ln in result.combined_text().splitlines() if ln.strip()), "")
        raise _Unavailable(f"nvidia-smi failed ({result.describe()}): {first}".rstrip(": "))
    devices = []
    driver = None
    for row in csv.reader(result.stdout_text().splitlines(), skipinitialspace=True):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != len(fields):
            continue
        rec = {f: _na(v) for f, v in zip(fields, row)}
        cc = None
        if rec.get("compute_cap"):
            m = re.fullmatch(r"(\d+)\.(\d+)", rec["compute_cap"])
            cc = (int(m.group(1)), int(m.group(2))) if m else None
        mem = None
        if rec.get("memory.total"):
            mem = _attempt(lambda: int(float(rec["memory.total"]) * 1024 * 1024))
        index = _attempt(lambda: int(rec["index"]), len(devices))
        devices.append(
            GpuDevice(
                index=index,
                name=rec.get("name") or "",
                uuid=rec.get("uuid"),
                compute_capability=cc,
                sm_count=None,
                total_memory_bytes=mem,
                pci_bus_id=format_pci_bus_id(rec.get("pci.bus_id")),
            )
        )
        driver = driver or rec.get("driver_version")
    return _Partial(devices=devices, driver_version=driver)


_SOURCE_FUNCS = {"pycuda": _from_pycuda, "cupy": _from_cupy, "nvidia-smi": _from_nvidia_smi}


# --------------------------------------------------------------------------- visibility


def apply_visible_devices(devices: Sequence[GpuDevice], visible: str | None,
                          order: str | None = None) -> tuple[tuple[GpuDevice, ...], tuple[str, ...]]:
    """The devices a CUDA process sees under ``CUDA_VISIBLE_DEVICES``, from nvidia-smi's full list.

    nvidia-smi ignores the variable and lists devices in PCI bus order; CUDA applies it,
    stopping at the first entry it cannot resolve. Returned devices carry CUDA ordinals.
    """
    if visible is None:
        return tuple(devices), ()
    notes: list[str] = []
    chosen: list[GpuDevice] = []
    used_index = False
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            break
        if token.upper().startswith("MIG-"):
            return tuple(devices), (f"CUDA_VISIBLE_DEVICES={visible!r} names MIG instances: "
                                    "nvidia-smi's full device list kept",)
        match: list[GpuDevice]
        if re.fullmatch(r"-?\d+", token):
            used_index = True
            match = [d for d in devices if d.index == int(token)]
        else:
            match = [d for d in devices if d.uuid and d.uuid.lower().startswith(token.lower())]
        if len(match) != 1 or match[0] in chosen:
            break
        chosen.append(match[0])
    result = tuple(
        GpuDevice(index=i, name=d.name, uuid=d.uuid, compute_capability=d.compute_capability,
                  sm_count=d.sm_count, total_memory_bytes=d.total_memory_bytes, pci_bus_id=d.pci_bus_id)
        for i, d in enumerate(chosen)
    )
    notes.append(f"nvidia-smi lists all GPUs; CUDA_VISIBLE_DEVICES={visible!r} applied "
                 f"({len(result)} of {len(devices)} visible, renumbered as CUDA ordinals)")
    if used_index and len(devices) > 1 and (order or "").upper() != "PCI_BUS_ID":
        notes.append("CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's ordinals may differ from nvidia-smi's")
    return result, tuple(notes)


# --------------------------------------------------------------------------- driver extras


def read_proc_driver_version(path: Path | None = None) -> str | None:
    """The kernel module's version from /proc/driver/nvidia/version, or None."""
    try:
        text = (path or PROC_DRIVER_VERSION).read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\s", text)
    return m.group(1) if m else None


def driver_api_version() -> str | None:
    """cuDriverGetVersion through libcuda (no context, no cuInit), or None."""
    try:
        name = ctypes.util.find_library("cuda") or "libcuda.so.1"
        lib = ctypes.CDLL(name)
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
        return cuda_version_str(version.value)
    except Exception:
        return None


def driver_api_uuid(ordinal: int) -> bytes | None:
    """The 16 raw bytes of cuDeviceGetUuid for a CUDA ordinal through libcuda, or None."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
        if lib.cuInit(0) != 0:
            return None
        device = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(device), int(ordinal)) != 0:
            return None
        raw = (ctypes.c_char * 16)()
        get = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
        if get(raw, device) != 0:
            return None
        return bytes(raw.raw)
    except Exception:
        return None


# --------------------------------------------------------------------------- entry point


def fingerprint_gpu(*, log_dir: Path, prefer: Sequence[str] = SOURCES) -> GpuFingerprint:
    """Who the GPUs are. Never raises for a missing or broken source: it is noted instead."""
    log_dir = Path(log_dir)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    notes: list[str] = []
    for source in prefer:
        func = _SOURCE_FUNCS.get(source)
        if func is None:
            notes.append(f"unknown GPU source {source!r} skipped")
            continue
        try:
            if source == "nvidia-smi":
                log_dir.mkdir(parents=True, exist_ok=True)
            partial = func(log_dir=log_dir)
        except _Unavailable as exc:
            notes.append(str(exc))
            continue
        except Exception as exc:
            notes.append(f"{source} failed: {type(exc).__name__}: {exc}")
            continue
        devices = tuple(partial.devices)
        if source == "nvidia-smi":
            devices, more = apply_visible_devices(devices, visible, os.environ.get("CUDA_DEVICE_ORDER"))
            notes.extend(more)
        if not devices:
            notes.append(f"{source}: no CUDA device visible")
            continue
        return GpuFingerprint(
            source=source,
            devices=devices,
            driver_version=partial.driver_version or read_proc_driver_version(),
            driver_cuda_version=partial.driver_cuda_version or driver_api_version(),
            runtime_version=partial.runtime_version,
            visible_devices=visible,
            notes=tuple(notes),
        )
    return GpuFingerprint(
        source="none",
        devices=(),
        driver_version=read_proc_driver_version(),
        driver_cuda_version=None,
        runtime_version=None,
        visible_devices=visible,
        notes=tuple(notes),
    )
