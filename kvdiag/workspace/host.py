"""The rest of the environment: host, CUDA tools, and the cache key the controls use."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kvdiag
from kvdiag.errors import KvdiagError
from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.proc.sanitizer import find_sanitizer, sanitizer_version
from kvdiag.workspace.gpu import GpuFingerprint, fingerprint_gpu

TOOL_TIMEOUT_S = 30.0
CPUINFO = Path("/proc/cpuinfo")
# Where a CUDA toolkit usually lives when its bin/ is not on PATH.
CUDA_HOME_VARS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


@dataclass(frozen=True)
class ToolVersions:
    nvcc: str | None  # "13.0.88"
    compute_sanitizer: str | None  # "2025.3.1.0"
    compute_sanitizer_path: str | None
    nvcc_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "nvcc": self.nvcc,
            "nvcc_path": self.nvcc_path,
            "compute_sanitizer": self.compute_sanitizer,
            "compute_sanitizer_path": self.compute_sanitizer_path,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolVersions":
        return cls(nvcc=data["nvcc"], compute_sanitizer=data["compute_sanitizer"],
                   compute_sanitizer_path=data["compute_sanitizer_path"], nvcc_path=data["nvcc_path"])


@dataclass(frozen=True)
class HostInfo:
    hostname: str
    os: str
    python: str
    cpu: str | None
    cpu_count: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "os": self.os,
            "python": self.python,
            "cpu": self.cpu,
            "cpu_count": self.cpu_count,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HostInfo":
        return cls(hostname=str(data["hostname"]), os=str(data["os"]), python=str(data["python"]),
                   cpu=data["cpu"], cpu_count=data["cpu_count"])


@dataclass(frozen=True)
class Environment:
    host: HostInfo
    gpu: GpuFingerprint
    tools: ToolVersions
    kvdiag_version: str

    def key_material(self) -> dict[str, Any]:
        """What :meth:`key` hashes: what decides whether a detector's control still holds."""
        return {
            "gpus": [[d.name, d.cc_str] for d in self.gpu.devices],
            "driver": self.gpu.driver_version,
            "driver_cuda": self.gpu.driver_cuda_version,
            "runtime": self.gpu.runtime_version,
            "nvcc": self.tools.nvcc,
            "sanitizer": self.tools.compute_sanitizer,
        }

    def key(self) -> str:
        """A stable short hash of GPUs (name, cc), driver, runtime, nvcc and sanitizer versions."""
        blob = json.dumps(self.key_material(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key(),
            "kvdiag_version": self.kvdiag_version,
            "host": self.host.to_dict(),
            "gpu": self.gpu.to_dict(),
            "tools": self.tools.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Environment":
        """The environment :meth:`to_dict` wrote (``key`` is derived again): the memo's cached form."""
        return cls(host=HostInfo.from_dict(data["host"]), gpu=GpuFingerprint.from_dict(data["gpu"]),
                   tools=ToolVersions.from_dict(data["tools"]), kvdiag_version=str(data["kvdiag_version"]))


# --------------------------------------------------------------------------- parsing


def parse_nvcc_version(text: str) -> str | None:
    """``Cuda compilation tools, release 13.0, V13.0.88`` -> "13.0.88" (or "13.0" without the V part)."""
    m = re.search(r"\bV(\d+\.\d+(?:\.\d+)*)", text)
    if m:
        return m.group(1)
    m = re.search(r"release\s+(\d+\.\d+)", text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------- tools


def _cuda_homes() -> list[Path]:
    homes = [Path(os.environ[v]) for v in CUDA_HOME_VARS if os.environ.get(v)]
    homes.append(DEFAULT_CUDA_HOME)
    return homes


def find_cuda_tool(name: str) -> Path | None:
    """``name`` on PATH, else in ``$CUDA_HOME/bin`` (and /usr/local/cuda/bin)."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for home in _cuda_homes():
        for candidate in (home / "bin" / name, home / name / name):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None


def _tool_version(path: Path | None, parse, *, log_dir: Path, name: str) -> str | None:
    if path is None:
        return None
    try:
        result = run_command([str(path), "--version"], timeout=TOOL_TIMEOUT_S, log_dir=log_dir, name=name)
    except CommandNotFound:
        return None
    if result.timed_out:
        return None
    return parse(result.combined_text())


def _sanitizer_version(path: Path | None, log_dir: Path) -> str | None:
    if path is None:
        return None
    try:
        return sanitizer_version(path, log_dir, timeout=TOOL_TIMEOUT_S)
    except CommandNotFound:
        return None


def tool_versions(*, log_dir: Path, sanitizer: Path | None) -> ToolVersions:
    """nvcc's and compute-sanitizer's versions.

    ``sanitizer`` None: looked for as :func:`kvdiag.proc.sanitizer.find_sanitizer` does
    (a bad ``KVDIAG_COMPUTE_SANITIZER`` then counts as no sanitizer here).
    """
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    nvcc = find_cuda_tool("nvcc")
    if sanitizer is not None:
        san: Path | None = Path(sanitizer)
    else:
        try:
            san = find_sanitizer(None)
        except KvdiagError:
            san = None
    return ToolVersions(
        nvcc=_tool_version(nvcc, parse_nvcc_version, log_dir=log_dir, name="nvcc-version"),
        compute_sanitizer=_sanitizer_version(san, log_dir),
        compute_sanitizer_path=str(san) if san is not None else None,
        nvcc_path=str(nvcc) if nvcc is not None else None,
    )


# --------------------------------------------------------------------------- host


def cpu_model(cpuinfo: Path | None = None) -> str | None:
    try:
        text = (cpuinfo or CPUINFO).read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "cpu model", "Processor", "uarch"):
        m = re.search(rf"^{re.escape(key)}[ \t]*:[ \t]*(\S(?:.*\S)?)[ \t]*$", text, re.M)
        if m and m.group(1):
            return m.group(1)
    return platform.processor() or platform.machine() or None


def host_info() -> HostInfo:
    return HostInfo(
        hostname=socket.gethostname() or platform.node(),
        os=platform.platform(),
        python=platform.python_version(),
        cpu=cpu_model(),
        cpu_count=os.cpu_count(),
    )


def fingerprint_environment(*, log_dir: Path, sanitizer: Path | None) -> Environment:
    """Host, GPU and tool versions. Never raises for a missing GPU or tool."""
    log_dir = Path(log_dir)
    return Environment(
        host=host_info(),
        gpu=fingerprint_gpu(log_dir=log_dir),
        tools=tool_versions(log_dir=log_dir, sanitizer=sanitizer),
        kvdiag_version=kvdiag.__version__,
    )
