"""One way every test folder isolates kvdiag: its own home and lock root, no user setting,
and `python3` resolving to this interpreter (the fakes start with `#!/usr/bin/env python3`;
no version-manager shim in between, which costs a shell per fake process)."""

from __future__ import annotations

import os
import shutil
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


def isolate_git(mp: pytest.MonkeyPatch, home: Path) -> None:
    """Git without the user's or the system's configuration, with a fixed identity (the test is
    skipped where git is not installed). ``home`` becomes $HOME."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    home.mkdir(parents=True, exist_ok=True)
    mp.setenv("HOME", str(home))
    mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
    mp.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    for role in ("AUTHOR", "COMMITTER"):
        mp.setenv(f"GIT_{role}_NAME", "Test")
        mp.setenv(f"GIT_{role}_EMAIL", "test@example.invalid")
