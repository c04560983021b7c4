"""Starts a daemon that leaves the session (setsid) still holding stdout and stderr, prints the
daemon's pid and a last line, and exits 0 at once. The daemon sleeps SECONDS, then exits.

usage: leaves_a_daemon_holding_its_output.py SECONDS
"""
import os
import sys
import time

seconds = float(sys.argv[1])
pid = os.fork()
if pid == 0:
    os.setsid()
    time.sleep(seconds)
    os._exit(0)
print(f"daemon {pid}", flush=True)
print("parent done", flush=True)
