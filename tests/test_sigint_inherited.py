"""The test session works when started with SIGINT ignored, as a shell without job control starts its
background jobs (tests/conftest.py gives the process Python's usual handler back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from process_checks import SESSION_VAR

REPO = Path(__file__).resolve().parents[1]
STAGED_CTRL_C = ("tests/engine/test_discover.py::"
                 "test_a_discovery_stopped_by_ctrl_c_keeps_every_case_once_and_names_the_unrun")


def _carrying(token: str) -> list[int]:
    """The live processes whose environment carries ``token``: everything the nested session started."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if f"{SESSION_VAR}={token}".encode() in fh.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_staged_ctrl_c_still_stops_a_discovery_when_the_session_started_with_sigint_ignored():
    token = uuid.uuid4().hex          # the nested session's own, so that what it leaves can be found and ended
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", STAGED_CTRL_C],
                              cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, SESSION_VAR: token},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    finally:
        for pid in _carrying(token):      # a hung discovery's staged programs, in sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
