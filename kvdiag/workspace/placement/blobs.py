"""What a source tree's files are, by content and by stamp, when git cannot say (no .git, a shallow clone).

A release tarball carries no commit id, but every file in it is a git blob of the
repository it came from: its blob id (``git hash-object``: sha1 of ``blob <size>\\0``
and the bytes) is the same in any clone of that history. The ids of the files the
registry names therefore place a tree in a history (``kvdiag.workspace.placement.blob_timeline``)
without git being asked anything about the tree itself.

ggml's own CMakeLists.txt also stamps a version (``GGML_VERSION_MAJOR/MINOR/PATCH``,
from 0.9 on), which llama.cpp's copy under ``ggml/`` carries too; llama.cpp's build
number (``LLAMA_BUILD_NUMBER``) is filled in from git at configure time and is a
literal only in trees that were stamped by hand or by a packager.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["VersionStamp", "blob_id", "ggml_key", "ggml_version", "is_ggml_tree", "read_version_stamp", "tree_blobs",
           "tree_file"]

MAX_BLOB_BYTES = 8 * 1024 * 1024          # a source file; anything larger is not one the registry names
_VERSION_PART = re.compile(r"^\s*set\s*\(\s*GGML_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)\s*\)", re.M)
_BUILD_NUMBER = re.compile(r"^\s*set\s*\(\s*(?:LLAMA_)?BUILD_NUMBER\s+(\d+)\s*\)", re.M)


def blob_id(data: bytes) -> str:
    """The id git gives these bytes as a blob (``git hash-object`` without filters)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def ggml_key(path: str) -> str:
    """A path as ggml's own repository writes it: llama.cpp keeps ggml's files under ``ggml/``."""
    path = path.strip("/")
    return path[len("ggml/"):] if path.startswith("ggml/") else path


def tree_file(source: Path, key: str) -> Path | None:
    """Where the file ggml calls ``key`` sits in this tree: at the root (a ggml tree) or under
    ``ggml/`` (a llama.cpp tree); None when it is in neither place."""
    for candidate in (source / "ggml" / key, source / key) if _is_llama_layout(source) else (source / key,):
        if candidate.is_file():
            return candidate
    return None


def _is_llama_layout(source: Path) -> bool:
    return (source / "ggml" / "CMakeLists.txt").is_file()


def is_ggml_tree(source: Path) -> bool:
    """ggml's own repository layout: its sources and its version stamp at the root, no ``ggml/`` inside
    (llama.cpp, whisper.cpp and forks carry ggml under ``ggml/``)."""
    return (not _is_llama_layout(source) and (source / "src" / "ggml.c").is_file()
            and ggml_version(_read(source / "CMakeLists.txt")) is not None)


def tree_blobs(source: Path, keys: Iterable[str]) -> dict[str, str]:
    """``{key: blob id}`` for each of ggml's ``keys`` the tree holds (absent files are left out)."""
    found: dict[str, str] = {}
    for key in keys:
        path = tree_file(source, key)
        if path is None:
            continue
        try:
            if path.stat().st_size > MAX_BLOB_BYTES:
                continue
            found[key] = blob_id(path.read_bytes())
        except OSError:
            continue
    return found


@dataclass(frozen=True)
class VersionStamp:
    """The version a tree's CMake files state, and where each was read."""

    ggml: str | None = None           # "0.9.7"
    ggml_file: str | None = None      # "ggml/CMakeLists.txt"
    build_number: int | None = None   # llama.cpp's LLAMA_BUILD_NUMBER, when a literal
    build_file: str | None = None

    def describe(self) -> str:
        parts = []
        if self.ggml:
            parts.append(f"GGML_VERSION {self.ggml} ({self.ggml_file})")
        if self.build_number is not None:
            parts.append(f"BUILD_NUMBER {self.build_number} ({self.build_file})")
        return "; ".join(parts) or "no version stamp"


def ggml_version(text: str) -> str | None:
    """``MAJOR.MINOR.PATCH`` from a CMakeLists.txt's ``set(GGML_VERSION_*)`` lines, or None."""
    parts = dict(_VERSION_PART.findall(text))
    if not {"MAJOR", "MINOR", "PATCH"} <= set(parts):
        return None
    return f"{int(parts['MAJOR'])}.{int(parts['MINOR'])}.{int(parts['PATCH'])}"


def read_version_stamp(source: Path) -> VersionStamp:
    """ggml's version from ``ggml/CMakeLists.txt`` or ``CMakeLists.txt``; a build number from the
    top-level CMake files (``CMakeLists.txt``, ``cmake/build-info.cmake``) when one is a literal."""
    ggml = ggml_file = None
    for rel in ("ggml/CMakeLists.txt", "CMakeLists.txt"):
        version = ggml_version(_read(source / rel))
        if version is not None:
            ggml, ggml_file = version, rel
            break
    number = number_file = None
    for rel in ("cmake/build-info.cmake", "CMakeLists.txt", "common/CMakeLists.txt"):
        match = _BUILD_NUMBER.search(_read(source / rel))
        if match and int(match.group(1)) > 0:          # 0 is the "git did not say" default
            number, number_file = int(match.group(1)), rel
            break
    return VersionStamp(ggml, ggml_file, number, number_file)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
