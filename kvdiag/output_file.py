"""Writing a user's output file (`-o FILE`, `--output DIR`): atomically, and only onto a regular file.

A reader sees the old file or the new one, never half of one; a path that
exists and is not a regular file (a folder, a FIFO, a device, a symlink to one)
is refused with a UsageError, never replaced. The one place commands write
output files, so a shared helper can take its place.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvdiag.errors import UsageError


def write_output(path: Path, text: str) -> Path:
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"refusing to write {path}: it exists and is not a regular file")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
