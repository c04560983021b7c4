"""A build's CMake configuration, read from its ``CMakeCache.txt``.

Only reading: which generator, source tree, CUDA options and flags the user
configured, and whether the device code carries line information (the flags a
sanitizer needs to name ``file:line``). Nothing here runs a program.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from kvdiag.errors import UsageError

CMAKE_CACHE = "CMakeCache.txt"
# The options that turned CUDA on, across llama.cpp/ggml's history.
CUDA_OPTIONS = ("GGML_CUDA", "LLAMA_CUDA", "LLAMA_CUBLAS", "GGML_CUBLAS")
_LINEINFO_FLAGS = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")
_CACHE_LINE = re.compile(
    r'^(?:"(?P<qkey>[^"]*)"|(?P<key>[^:="]+))(?::(?P<type>[A-Za-z]+))?=(?P<value>.*)$'
)


def parse_cmake_cache(text: str) -> dict[str, str]:
    """``KEY:TYPE=VALUE`` lines of a CMakeCache.txt as {KEY: VALUE}; comments skipped."""
    entries: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("//") or line.startswith("#"):
            continue
        m = _CACHE_LINE.match(line)
        if not m:
            continue
        key = m.group("qkey") if m.group("qkey") is not None else m.group("key").strip()
        value = m.group("value")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]  # CMake quotes values with significant trailing spaces
        entries[key] = value
    return entries


def read_cmake_cache(path: Path) -> dict[str, str]:
    try:
        return parse_cmake_cache(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def cmake_bool(value: str | None) -> bool:
    """CMake's truth: ON/YES/TRUE/Y/non-zero number; OFF/NO/FALSE/N/IGNORE/NOTFOUND/*-NOTFOUND/'' are false."""
    if value is None:
        return False
    v = value.strip().upper()
    if v in ("ON", "YES", "TRUE", "Y"):
        return True
    if v in ("", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND") or v.endswith("-NOTFOUND"):
        return False
    try:
        return float(v) != 0
    except ValueError:
        return False


def _flag_tokens(flags: str) -> list[str]:
    try:
        return shlex.split(flags)
    except ValueError:
        return flags.split()


def lineinfo_in_flags(flags: str | None) -> str | None:
    """The flag of ``flags`` that gives device line information, or None."""
    if not flags:
        return None
    for token in _flag_tokens(flags):
        if token in _LINEINFO_FLAGS:
            return token
    return None


def nonempty(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def cache_source_dir(cache: Mapping[str, str]) -> Path | None:
    home = nonempty(cache.get("CMAKE_HOME_DIRECTORY"))
    if home:
        return Path(home)
    project = nonempty(cache.get("CMAKE_PROJECT_NAME"))
    if project and nonempty(cache.get(f"{project}_SOURCE_DIR")):
        return Path(cache[f"{project}_SOURCE_DIR"].strip())
    for key, value in cache.items():
        if key.endswith("_SOURCE_DIR") and nonempty(value):
            return Path(value.strip())
    return None


def cache_lineinfo(cache: Mapping[str, str], build_type: str | None) -> tuple[bool, str | None]:
    keys = ["CMAKE_CUDA_FLAGS"]
    if build_type:
        keys.append(f"CMAKE_CUDA_FLAGS_{build_type.upper()}")
    for key in keys:
        flag = lineinfo_in_flags(cache.get(key))
        if flag:
            return True, f"{key}: {flag}"
    if cmake_bool(cache.get("GGML_CUDA_DEBUG")):
        return True, "GGML_CUDA_DEBUG=ON (adds -lineinfo)"
    return False, None


def build_options(cache: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in cache.items()
        if (k.startswith("GGML_") or k.startswith("LLAMA_")) and "-" not in k
    }


def cache_make_program(cache: Mapping[str, str]) -> str | None:
    """The build tool the build was generated for (``CMAKE_MAKE_PROGRAM``), when it is an
    executable file on this machine; None otherwise (then the tool is looked up on PATH).

    ninja rewrites a build log another ninja version wrote, so the build's own ninja is the
    one that can dry-run it: a machine may have several (a system ninja, a pip wheel's)."""
    value = nonempty(cache.get("CMAKE_MAKE_PROGRAM"))
    if value is None:
        return None
    path = Path(value)
    return str(path) if path.is_absolute() and path.is_file() and os.access(path, os.X_OK) else None
