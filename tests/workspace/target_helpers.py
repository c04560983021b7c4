"""Helpers shared by the kvdiag.workspace tests (a uniquely named module, imported by name)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from kvdiag.proc.runner import run_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "builds"


def write_exe(path: Path, text: str) -> Path:
    """Write an executable script (a ``#!/bin/sh`` one unless ``text`` has its own shebang)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not text.startswith("#!"):
        text = "#!/bin/sh\n" + text
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def write_py_exe(path: Path, body: str) -> Path:
    """An executable Python script run by this interpreter."""
    return write_exe(path, f"#!{sys.executable}\n{body}")


def run(argv, cwd: Path, log_dir: Path, name: str = "helper"):
    """Run a helper command in a test (through the runner too) and insist it worked."""
    result = run_command([str(a) for a in argv], timeout=60, log_dir=log_dir, name=name, cwd=cwd)
    assert result.returncode == 0, result.combined_text()
    return result
