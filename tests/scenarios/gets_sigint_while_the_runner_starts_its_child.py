"""Runs kvdiag's run_command on a scenario and sends itself Ctrl-C right after the child is spawned,
before the runner has begun to watch it: the window where the runner records the child's pid.

usage: gets_sigint_while_the_runner_starts_its_child.py LOG_DIR SCENARIO [ARGS...]
Prints one JSON line: how run_command ended ("CommandInterrupted", "KeyboardInterrupt" or
"returned") and the child's pid; exits 130 on CommandInterrupted, 3 on a bare KeyboardInterrupt.
"""
import json
import os
import signal
import sys
from pathlib import Path

import kvdiag.proc.runner as runner

signal.signal(signal.SIGINT, signal.default_int_handler)
spawned: list[int] = []
real_spawn = runner._spawn


def spawn_then_ctrl_c(*args, **kwargs):
    running, pump = real_spawn(*args, **kwargs)
    spawned.append(running.pid)
    os.kill(os.getpid(), signal.SIGINT)
    return running, pump


runner._spawn = spawn_then_ctrl_c
try:
    runner.run_command([sys.executable, *sys.argv[2:]], timeout=60, log_dir=Path(sys.argv[1]), name="victim",
                       kill_grace=1.0)
except runner.CommandInterrupted:
    print(json.dumps({"ended": "CommandInterrupted", "pid": spawned[0]}), flush=True)
    sys.exit(130)
except KeyboardInterrupt:
    print(json.dumps({"ended": "KeyboardInterrupt", "pid": spawned[0]}), flush=True)
    sys.exit(3)
print(json.dumps({"ended": "returned", "pid": spawned[0]}), flush=True)
