"""How the runner sees its child's end without reaping it or taking sh's lock (kvdiag.proc.groups.leader_exit).

The runner once polled sh's ``is_alive()``, whose lock a Ctrl-C at the wrong instant left held
(tests/scenarios/gets_sigint_while_sh_holds_its_wait_lock.py). The kernel's answer must say the same as
a reap would: running, an exit code, or the signal (negative), and leave the child to be reaped once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kvdiag.proc.groups import leader_exit


def _ended(pid: int) -> tuple[bool, int | None]:
    end = time.monotonic() + 10
    while time.monotonic() < end:
        answer = leader_exit(pid)
        if answer[0]:
            return answer
        time.sleep(0.01)
    return leader_exit(pid)


def test_a_running_child_then_its_exit_code_and_it_is_still_ours_to_reap():
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.3); sys.exit(7)"])
    try:
        assert leader_exit(child.pid) == (False, None)
        assert _ended(child.pid) == (True, 7)
        assert leader_exit(child.pid) == (True, 7)          # asked again: nothing was reaped
    finally:
        assert child.wait(timeout=10) == 7                  # the one reap, by its owner


def test_a_child_killed_by_a_signal_reads_as_the_negative_signal():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        assert _ended(child.pid) == (True, -signal.SIGKILL)
    finally:
        child.wait(timeout=10)


def test_a_pid_that_is_not_our_child_or_no_longer_is_has_ended_with_no_code():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)                                  # reaped by someone else (here: Popen)
    assert leader_exit(child.pid) == (True, None)
    assert leader_exit(os.getppid()) == (True, None)        # alive, but not ours
