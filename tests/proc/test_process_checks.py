"""The tests' own "is it gone?" check: a recycled pid of another test session is not ours."""

from __future__ import annotations

import os
import subprocess
import sys

from process_checks import SESSION_VAR, pid_gone

SLEEPER = [sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(30)"]


def start(env: dict[str, str]) -> subprocess.Popen:
    """A sleeping child, returned once it runs its own program (its /proc environ is then its own)."""
    proc = subprocess.Popen(SLEEPER, env=env, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_our_live_process_is_not_gone_and_its_reaped_pid_is():
    proc = start(dict(os.environ))
    try:
        assert not pid_gone(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert pid_gone(proc.pid)


def test_a_process_of_another_test_session_does_not_count_as_ours():
    proc = start({**os.environ, SESSION_VAR: "another-session"})
    try:
        assert pid_gone(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_process_without_any_token_still_counts_as_ours():
    env = {k: v for k, v in os.environ.items() if k != SESSION_VAR}
    proc = start(env)
    try:
        assert not pid_gone(proc.pid, within=0.1)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
