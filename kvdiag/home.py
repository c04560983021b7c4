"""Where kvdiag keeps its state: runs, the controls cache, compiled canaries, history."""

from __future__ import annotations

import os
from pathlib import Path


def kvdiag_home() -> Path:
    """$KVDIAG_HOME, else ~/.kvdiag. Created on first use."""
    env = os.environ.get("KVDIAG_HOME")
    home = Path(env) if env else Path.home() / ".kvdiag"
    home.mkdir(parents=True, exist_ok=True)
    return home
