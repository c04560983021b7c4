"""Runs kvdiag's run_command on a scenario and sends itself Ctrl-C at the first moment the main
thread holds sh's wait lock (the lock sh's poll, ``is_alive()``, and ``wait()`` take).

A real Ctrl-C lands there at random: sh's poll acquires the lock and enters its ``try`` a few
bytecodes later, and a KeyboardInterrupt raised in between leaves the lock held for ever; the
runner's later ``wait()`` then blocked on it and kvdiag never ended (a CI run: a verify under
SIGINT still running 30 s later, SIGKILLed, its build's zombie left behind).

usage: gets_sigint_while_sh_holds_its_wait_lock.py LOG_DIR SCENARIO [ARGS...]
Prints one JSON line: how run_command ended ("CommandInterrupted", "KeyboardInterrupt" or
"returned"), the child's pid and whether the Ctrl-C was sent; exits 130 on CommandInterrupted.
"""
import json
import os
import signal
import sys
import threading
from pathlib import Path

import kvdiag.proc.runner as runner

signal.signal(signal.SIGINT, signal.default_int_handler)
spawned: list[int] = []
sent: list[bool] = []
real_spawn = runner._spawn


class LockThatCtrlCsOnceTaken:
    """sh's lock, unchanged, except that the main thread's first successful acquire is followed by
    a Ctrl-C whose handler runs as acquire() returns: the lock held, the exception on its way."""

    def __init__(self, real):
        self.real = real

    def acquire(self, blocking=True, timeout=-1):
        got = self.real.acquire(blocking, timeout)
        if got and not sent and threading.current_thread() is threading.main_thread():
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return got

    def release(self):
        self.real.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def spawn_with_a_lock_that_ctrl_cs(*args, **kwargs):
    running, pump = real_spawn(*args, **kwargs)
    spawned.append(running.pid)
    running.process._wait_lock = LockThatCtrlCsOnceTaken(running.process._wait_lock)
    return running, pump


def report(ended: str) -> None:
    print(json.dumps({"ended": ended, "pid": spawned[0], "ctrl_c_sent": bool(sent)}), flush=True)


runner._spawn = spawn_with_a_lock_that_ctrl_cs
try:
    runner.run_command([sys.executable, *sys.argv[2:]], timeout=60, log_dir=Path(sys.argv[1]), name="victim",
                       kill_grace=1.0)
except runner.CommandInterrupted:
    report("CommandInterrupted")
    sys.exit(130)
except KeyboardInterrupt:
    report("KeyboardInterrupt")
    sys.exit(3)
report("returned")
