"""Helpers of the server tests: stand-in llama-servers from tests/scenarios/servers.

Each stand-in listens on 127.0.0.1 on the port kvdiag passes, ends itself after
``--lifetime`` seconds at most, and prints its pid (and its grandchild's with
``--grandchild``) so the tests can prove nothing outlives an attempt.
"""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

from process_checks import pid_gone as _pid_gone

from kvdiag.registry.entry import Step

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / "tests" / "scenarios" / "servers"
LIFETIME = "20"      # no stand-in of these tests may live longer than this, whatever goes wrong


def standin(name: str, *args: str) -> list[str]:
    """argv running a stand-in server with this interpreter."""
    return [sys.executable, str(SERVERS / f"{name}.py"), "--lifetime", LIFETIME, *args]


def standin_executable(folder: Path, name: str) -> Path:
    """An executable file that runs the stand-in ``name`` (for a build's bin/llama-server)."""
    exe = folder / "llama-server"
    folder.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\n"
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(SERVERS)!r})\n"
        f"sys.argv[0] = {str(SERVERS / (name + '.py'))!r}\n"
        f"runpy.run_path(sys.argv[0], run_name='__main__')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def server_step(timeout: int = 20, **vars) -> Step:
    return Step(name="server", kind="server", description="a stand-in server", timeout=timeout,
                vars={"prompt": "the lighthouse keeper", "n_predict": 8, **vars})


def pid_gone(pid: int, within: float = 3.0) -> bool:
    """A stopped server's pid: gone within `within` seconds (see process_checks.pid_gone)."""
    return _pid_gone(pid, within)


def pids_in(text: str) -> dict[str, int]:
    """The stand-in's and its grandchild's pids, from its stdout."""
    found = {}
    for key, pattern in (("standin", r"^standin pid (\d+)$"), ("grandchild", r"^grandchild (\d+)$")):
        m = re.search(pattern, text, re.M)
        if m:
            found[key] = int(m.group(1))
    return found
