"""Helpers of the tests of kvdiag.proc (a uniquely named module: several test folders have a conftest)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from process_checks import pid_gone, wait_until  # noqa: F401 - re-exported for the proc tests


REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tests" / "scenarios"


def scenario(name: str, *args: object) -> list[str]:
    """argv running a Python scenario program with this interpreter."""
    return [sys.executable, str(SCENARIOS / name), *map(str, args)]


def child_env() -> dict[str, str]:
    """Environment for a child Python that must import kvdiag from this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env




def my_zombies() -> list[int]:
    """Zombie children of this process."""
    me = os.getpid()
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            data = Path(f"/proc/{e}/stat").read_bytes()
        except OSError:
            continue
        tail = data[data.rfind(b")") + 2:].split()
        if tail[0] == b"Z" and int(tail[1]) == me:
            out.append(int(e))
    return out
