"""Forks a grandchild that sleeps forever, prints 'grandchild <pid>', then hangs too.

Both stay in the process group the runner gave the child.
"""
import os
import time

pid = os.fork()
if pid == 0:
    while True:
        time.sleep(60)
print(f"grandchild {pid}", flush=True)
while True:
    time.sleep(60)
