"""Where kvdiag keeps its state: runs, the controls cache, compiled canaries, history."""

from __future__ import annotations

import os
from pathlib import Path

from kvdiag.errors import UsageError


def kvdiag_home() -> Path:
    """$KVDIAG_HOME, else ~/.kvdiag. Created on first use; a home that is a file or not
    writable is a UsageError naming it (the user's setting, not kvdiag's failure)."""
    env = os.environ.get("KVDIAG_HOME")
    home = Path(env) if env else Path.home() / ".kvdiag"
    where = "KVDIAG_HOME" if env else "kvdiag's home"
    if home.exists() and not home.is_dir():
        raise UsageError(f"{where} {home} is not a directory; point KVDIAG_HOME at a folder")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{where} {home} cannot be created: {exc.strerror}") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise UsageError(f"{where} {home} is not writable; point KVDIAG_HOME at a folder you can write")
    return home
