"""Memoised inspections: the environment fingerprint and a test-backend-ops probe.

A verdict in seconds cannot spend a second of every run creating a CUDA context
to read the GPU's name, running `nvcc --version` and `compute-sanitizer
--version`, and asking test-backend-ops for its usage text. Those answers only
change when the machine reboots, the driver or a tool is replaced, or the binary
is rebuilt, so they are cached under `$KVDIAG_HOME/cache/` keyed by exactly
that: the boot id, the driver's version file, CUDA_VISIBLE_DEVICES, the paths,
sizes and mtimes of nvcc, compute-sanitizer and the binary, and kvdiag's version.
`KVDIAG_NO_CACHE=1` turns it off.

The cache holds data, never code: each answer is kept as JSON through a
:class:`Codec` (``load(dump(value)) == value``), in a file that names its format,
its kind and its key. Reading one runs nothing (the serialized Python objects kept
here before did: whoever could write the cache folder ran code as the next user of
kvdiag). A file that is not a regular file, too large, not JSON, of another format
version, kind or key, or whose value does not load is a miss, never an error: the
answer is computed again and the file rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import kvdiag
from kvdiag.errors import KvdiagError
from kvdiag.fileio import parse_json

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
DRIVER_VERSION = Path("/proc/driver/nvidia/version")
CACHE_FORMAT = "kvdiag-cache/1"     # a new shape of any cached record needs a new version
MAX_CACHE_BYTES = 16 << 20          # a usage text and an op list are a few KB


@dataclass(frozen=True)
class Codec:
    """How one kind of answer is kept as JSON data and read back: ``load(dump(value)) == value``."""

    dump: Callable[[Any], Any]
    load: Callable[[Any], Any]


def _text(data: Any) -> str:
    if not isinstance(data, str):
        raise TypeError(f"a cached text is a string, not {type(data).__name__}")
    return data


TEXT = Codec(dump=_text, load=_text)

_MISS = object()


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


def _load(path: Path, kind: str, key: str, codec: Codec) -> Any:
    """The answer kept at ``path``, or _MISS (see the module's docstring for what is one)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
            return _MISS
        doc = parse_json(path.read_bytes().decode("utf-8"))
        if not isinstance(doc, dict) or (doc.get("format"), doc.get("kind"), doc.get("key")) != (CACHE_FORMAT, kind, key):
            return _MISS
        return codec.load(doc["value"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
        return _MISS


def _store(path: Path, kind: str, key: str, codec: Codec, value: Any) -> None:
    """Keep ``value`` at ``path`` (atomically); a cache that cannot be written is only slower."""
    from kvdiag.fileio import write_atomic

    try:
        text = json.dumps({"format": CACHE_FORMAT, "kind": kind, "key": key, "value": codec.dump(value)},
                          allow_nan=False)
        write_atomic(path, text + "\n")
    except (OSError, ValueError, TypeError, KvdiagError):
        pass


def memoised(home: Path, kind: str, key: str, compute: Callable[[], Any], codec: Codec,
             keep: Callable[[Any], bool] = lambda value: True) -> Any:
    """compute() once per key; later calls read the kept answer back through ``codec``.

    `keep` decides whether an answer is worth remembering (a fingerprint that
    found no GPU is not: the next run should look again). A cache folder that fails
    the home's trust check (kvdiag.trust) is refused (UnsafePath), not read."""
    from kvdiag.home import home_folder

    if os.environ.get("KVDIAG_NO_CACHE"):
        return compute()
    path = home_folder(home, "cache") / f"{kind}-{key}.json"
    value = _load(path, kind, key, codec)
    if value is not _MISS:
        return value
    value = compute()
    if keep(value):
        _store(path, kind, key, codec, value)
    return value
