"""Whether this machine's ninja can read a build's ``.ninja_log`` without discarding it.

ninja rewrites a build log of another format version when it starts, a dry run
(``ninja -n``) included: ninja 1.13 meets the ``# ninja log v5`` that 1.11 wrote with
"build log version is too old; starting over", deletes the file, and then lists every
step as pending. A staleness check must neither cost the user's build its log (the next
build would redo every step) nor call the build stale for that reason, so the two
versions are compared before ninja is run in the user's build directory.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

from kvdiag.proc.runner import CommandNotFound, run_command

LOG_NAME = ".ninja_log"
_HEADER = re.compile(r"# ninja log v(\d+)\s*$")
_PROBE_BUILD = "rule touch\n  command = touch $out\nbuild probe.out: touch\n"


def log_version(path: Path) -> int | None:
    """The format version in a build log's first line; None when absent or unrecognised."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(64).decode("ascii", "replace")
    except OSError:
        return None
    match = _HEADER.match(first)
    return int(match.group(1)) if match else None


@functools.lru_cache(maxsize=4)
def _written_version(ninja: str, stamp: float) -> int | None:
    """The log version this ninja writes, learnt from one build of a one-step project."""
    del stamp  # part of the memo key only: a replaced ninja is asked again
    with tempfile.TemporaryDirectory(prefix="kvdiag-ninja-log-") as tmp:
        scratch = Path(tmp)
        (scratch / "build.ninja").write_text(_PROBE_BUILD)
        try:
            result = run_command([ninja, "-C", str(scratch)], timeout=30, log_dir=scratch / "logs",
                                 name="ninja-log-version")
        except CommandNotFound:
            return None
        if result.returncode != 0:
            return None
        return log_version(scratch / LOG_NAME)


def log_conflict(build_dir: Path, ninja: str = "ninja") -> str | None:
    """Why running ``ninja`` (a path, or a name on PATH) in ``build_dir`` would discard its log, or None
    if it would not."""
    log = build_dir / LOG_NAME
    if not log.is_file():
        return None  # nothing to lose
    ninja = shutil.which(ninja)
    if ninja is None:
        return None  # the dry run itself reports a missing ninja
    have = log_version(log)
    writes = _written_version(ninja, os.stat(ninja).st_mtime)
    if writes is None or have == writes:
        return None
    found = f"log v{have}" if have is not None else "an unrecognised header"
    return (f"{log} has {found} and the ninja here ({ninja}) writes log v{writes}: a dry run would "
            f"discard that log (the next build would redo every step), so it was not run")
