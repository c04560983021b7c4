"""Memoised inspections: the environment fingerprint and a test-backend-ops probe.

A verdict in seconds cannot spend a second of every run creating a CUDA context
to read the GPU's name, running `nvcc --version` and `compute-sanitizer
--version`, and asking test-backend-ops for its usage text. Those answers only
change when the machine reboots, the driver or a tool is replaced, or the binary
is rebuilt, so they are cached under `$KVDIAG_HOME/cache/` keyed by exactly
that: the boot id, the driver's version file, CUDA_VISIBLE_DEVICES, the paths,
sizes and mtimes of nvcc, compute-sanitizer and the binary, and kvdiag's version.
Anything unreadable is a miss, never an error. `KVDIAG_NO_CACHE=1` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

import kvdiag

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
DRIVER_VERSION = Path("/proc/driver/nvidia/version")


def _file_stamp(path: Path | str | None) -> str:
    if not path:
        return "-"
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return "-"


def environment_key(sanitizer: Path | None) -> str:
    parts = [
        kvdiag.__version__, _read(BOOT_ID), _read(DRIVER_VERSION),
        os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        _file_stamp(sanitizer), _file_stamp(shutil.which("nvcc")), _file_stamp(shutil.which("nvidia-smi")),
        os.environ.get("CUDA_HOME", ""), os.environ.get("KVDIAG_COMPUTE_SANITIZER", ""),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def binary_key(binary: Path) -> str:
    return hashlib.sha256(f"{kvdiag.__version__}\n{_file_stamp(binary)}".encode()).hexdigest()[:24]


def memoised(home: Path, kind: str, key: str, compute: Callable[[], Any],
             keep: Callable[[Any], bool] = lambda value: True) -> Any:
    """compute() once per key; later calls read the pickled answer back.

    `keep` decides whether an answer is worth remembering (a fingerprint that
    found no GPU is not: the next run should look again)."""
    if os.environ.get("KVDIAG_NO_CACHE"):
        return compute()
    path = home / "cache" / f"{kind}-{key}.pickle"
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except Exception:  # a miss: absent, truncated, or from another layout
        pass
    value = compute()
    if not keep(value):
        return value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(value, fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return value
