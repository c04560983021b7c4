"""Runs kvdiag's run_command on a scenario (a long timeout) and waits for Ctrl-C.

usage: runs_runner_until_sigint.py LOG_DIR SCENARIO [ARGS...]
Prints the partial result as one JSON line and exits 130 on CommandInterrupted.
"""
import json
import signal
import sys
from pathlib import Path

from kvdiag.proc.runner import CommandInterrupted, run_command

# A shell may start us with SIGINT ignored (background jobs): take it back.
signal.signal(signal.SIGINT, signal.default_int_handler)
log_dir = Path(sys.argv[1])
print("runner started", flush=True)
try:
    res = run_command([sys.executable, *sys.argv[2:]], timeout=60, log_dir=log_dir,
                      name="victim", kill_grace=1.0)
except CommandInterrupted as exc:
    print(json.dumps(exc.result.to_dict()), flush=True)
    sys.exit(130)
print(json.dumps(res.to_dict()), flush=True)
sys.exit(0)
