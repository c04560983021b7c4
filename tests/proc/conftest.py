"""Fixtures of the tests of kvdiag.proc; the helpers are in proc_helpers.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from proc_helpers import SCENARIOS, my_zombies


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture(scope="session")
def abort_program(tmp_path_factory) -> Path:
    """prints_then_aborts.c compiled with gcc (skip where gcc is absent)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    out = tmp_path_factory.mktemp("cbuild") / "prints_then_aborts"
    subprocess.run([gcc, "-O0", "-o", str(out), str(SCENARIOS / "prints_then_aborts.c")], check=True)
    return out


@pytest.fixture
def new_zombies():
    """The zombie children of this process that were not there when the test began. pytest's process is a
    subreaper once a runner test has run in it, so the children of a kvdiag that another test had to kill
    are adopted here; such a leftover is that test's failure (it failed four tests on CI once), not this one's."""
    before = set(my_zombies())
    return lambda: sorted(set(my_zombies()) - before)
