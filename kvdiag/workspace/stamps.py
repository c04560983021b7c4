"""What a run's files were when it ran: each file's real path, size and modification time.

`kvdiag verify --before RUN` may stand a recorded run in for its BEFORE arm only when
the files that run used are the files verify would use now: the build's programs and
libraries, and the model an environment variable names. A stamp is what the memoised
inspections already key a binary by (kvdiag.workspace.memo): a rebuild or a rewritten
model changes the modification time, so equal stamps mean the same file. Nothing is
hashed: the seed-scale model is 27 GiB, and hashing it would cost more than a D3 run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

# Where a build keeps its shared libraries (llama.cpp puts them beside the programs, in bin/).
LIBRARY_DIRS = ("bin", ".", "lib", "lib64")
_LIBRARY = re.compile(r"\.(so(\.\d+)*|dylib|dll)$", re.I)


def file_stamp(path: Path | str) -> dict[str, Any] | None:
    """``{"path", "size", "mtime_ns"}`` of the file ``path`` resolves to; None when it is not a readable file."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    if not os.path.isfile(real):
        return None
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def build_files(build_dir: Path, programs: Mapping[str, Path]) -> dict[str, dict[str, Any] | None]:
    """The stamps of ``programs`` and of every shared library in the build's library folders, keyed
    by their path relative to the build folder (a program that is not there stamps as None)."""
    build_dir = Path(build_dir)
    found: dict[str, dict[str, Any] | None] = {}
    for name, path in sorted(programs.items()):
        found[_relative(Path(path), build_dir, name)] = file_stamp(path)
    for sub in LIBRARY_DIRS:
        folder = build_dir if sub == "." else build_dir / sub
        try:
            children = sorted(folder.iterdir())
        except OSError:
            continue
        for child in children:
            if _LIBRARY.search(child.name) and not child.is_symlink():
                found.setdefault(_relative(child, build_dir, child.name), file_stamp(child))
    return found


def describe_stamp(stamp: Mapping[str, Any] | None) -> str:
    """One short phrase for a stamp: ``27.1 GiB, modified 2026-12-02 03:21:17.250 UTC`` (or ``absent``)."""
    if not stamp:
        return "absent"
    import time

    seconds, ns = divmod(int(stamp.get("mtime_ns", 0)), 1_000_000_000)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{ns // 1_000_000:03d} UTC"
    return f"{_size(int(stamp.get('size', 0)))}, modified {when}"


def _relative(path: Path, build_dir: Path, fallback: str) -> str:
    try:
        return str(Path(path).relative_to(build_dir))
    except ValueError:
        return fallback


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"
