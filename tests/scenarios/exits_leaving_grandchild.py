"""Forks a grandchild that sleeps forever (stdout and stderr closed), prints its pid, and exits 0 at once."""
import os
import time

pid = os.fork()
if pid == 0:
    os.close(1)
    os.close(2)
    while True:
        time.sleep(60)
print(f"grandchild {pid}", flush=True)
