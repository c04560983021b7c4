"""Scenario: hold a kvdiag scratch worktree open until interrupted.

    holds_worktree.py SOURCE LOG_DIR

Prints the worktree's path and "ready", then sleeps inside `scratch_worktree`;
a SIGINT must make the context manager remove the worktree before the process ends.

SIGINT is set to raise KeyboardInterrupt first: a process started with SIGINT ignored (under
nohup, from a background job, by some CI runners) passes that on to its children, and Python
then leaves it ignored, so the Ctrl-C this scenario stands for would never arrive (issue 43).
"""

import signal
import sys
import time
from pathlib import Path

from kvdiag.probes.worktree import scratch_worktree

signal.signal(signal.SIGINT, signal.default_int_handler)
source, log_dir = Path(sys.argv[1]), Path(sys.argv[2])
try:
    with scratch_worktree(source, "HEAD", log_dir=log_dir) as worktree:
        (worktree.path / "scratch-output.txt").write_text("work in progress\n")
        print(worktree.path, flush=True)
        print("ready", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
sys.exit(0)
