"""Is a test's process gone? One answer for every test folder.

A pid alone is ambiguous on a busy machine: with pid_max at 32768, two test
suites running at once (CI and a developer's run) recycle pids within seconds,
and a stand-in server that was stopped correctly looked alive because another
suite's new process had taken its pid. Every process this pytest session starts
inherits ``KVDIAG_TEST_SESSION`` (set in tests/conftest.py); a live pid whose
environment carries a *different* session's token belongs to the other suite,
so ours is gone. A pid without any token is still counted as ours: a check must
never call our own process gone when it is not.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

SESSION_VAR = "KVDIAG_TEST_SESSION"


def mark_session() -> str:
    """Give this test session its token (children inherit it through the environment)."""
    return os.environ.setdefault(SESSION_VAR, uuid.uuid4().hex)


def _belongs_to_another_session(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read().split(b"\0")
    except OSError:
        return False
    prefix = f"{SESSION_VAR}=".encode()
    tokens = {item[len(prefix):] for item in environ if item.startswith(prefix)}
    mine = os.environ.get(SESSION_VAR, "").encode()
    return bool(tokens) and mine not in tokens


def pid_gone(pid: int, within: float = 0.0) -> bool:
    """True when no process of ours, not even a zombie, has this pid (waiting up to `within` s).

    A grandchild killed with its group can still be in the kernel's exit path for a
    moment after the code under test saw the group empty; a live orphan never goes away.
    """
    end = time.monotonic() + within
    while os.path.exists(f"/proc/{pid}") and not _belongs_to_another_session(pid):
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
    return True


def ended_and_reaped(pid: int) -> bool:
    """Gone, or a zombie, then reaped: this test's process may have become the orphan's reaper (a
    subreaper set by kvdiag's runner in an earlier test of the same session), so it reaps it, leaving
    no zombie for the tests that count them (tests/proc/test_runner.py)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return True
    if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:          # not ours: whoever adopted it reaps it
        pass
    return True


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def interrupted_output(proc, timeout: float = 30.0) -> tuple:
    """Ctrl-C to ``proc``, then its (stdout, stderr), its pipes closed; killed and reaped if it
    outlives ``timeout``, so that no child of a test is left for a ResourceWarning to find."""
    try:
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
