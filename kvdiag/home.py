"""Where kvdiag keeps its state: runs, the controls cache, compiled canaries, history.

kvdiag reads back what it keeps here (run records, caches, scratch builds), so the home
and every folder in it must be controlled by this user alone: the same check as the
lock folders (kvdiag.trust). A home another user owns or can write, or one reached
through another user's symlink, is refused with one line (exit 64), before anything is
read from it or written to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvdiag.errors import UsageError
from kvdiag.trust import trusted_dir

ADVICE = "point KVDIAG_HOME at a folder of your own (mode 700)"


def _described() -> tuple[Path, str]:
    env = os.environ.get("KVDIAG_HOME")
    home = Path(env) if env else Path.home() / ".kvdiag"
    return home, "KVDIAG_HOME" if env else "kvdiag's home"


def kvdiag_home() -> Path:
    """$KVDIAG_HOME, else ~/.kvdiag. Created (mode 0700) on first use. A home that is a file
    or not writable, or that fails the trust check (kvdiag.trust), or a folder in it that
    fails it, is a UsageError naming it (the user's setting, not kvdiag's failure)."""
    home, where = _described()
    if home.exists() and not home.is_dir():
        raise UsageError(f"{where} {home} is not a directory; point KVDIAG_HOME at a folder")
    trusted_dir(home, where, ADVICE)
    if not os.access(home, os.W_OK | os.X_OK):
        raise UsageError(f"{where} {home} is not writable; point KVDIAG_HOME at a folder you can write")
    try:
        folders = sorted(entry.name for entry in os.scandir(home) if entry.is_dir())
    except OSError as exc:
        raise UsageError(f"{where} {home} cannot be read: {exc.strerror}") from None
    for name in folders:
        trusted_dir(home / name, f"{where}'s folder", ADVICE)
    return home


def home_folder(home: Path, name: str) -> Path:
    """``home/name``, created (mode 0700) when missing and checked like the home itself:
    every folder kvdiag keeps state in is made through here (runs, cache, scratch-builds, …)."""
    return trusted_dir(Path(home) / name, "kvdiag's folder", ADVICE)
