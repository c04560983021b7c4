"""One way every test folder isolates kvdiag: its own home and lock root, no user setting,
and `python3` resolving to this interpreter (the fakes start with `#!/usr/bin/env python3`;
no version-manager shim in between, which costs a shell per fake process)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


def isolate(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("KVDIAG_HOME", str(root / "home"))
    mp.setenv("KVDIAG_LOCK_DIR", str(root / "locks"))
    for name in ("KVDIAG_COMPUTE_SANITIZER", "KVDIAG_REGISTRY", "LLAMA_KV_BUILD", "LLAMA_KV_MODEL"):
        mp.delenv(name, raising=False)
    pybin = root / "pybin"
    pybin.mkdir()
    (pybin / "python3").symlink_to(sys.executable)
    mp.setenv("PATH", f"{pybin}{os.pathsep}{os.environ.get('PATH', '')}")
