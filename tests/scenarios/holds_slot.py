"""Takes slots of a kvdiag SlotPool, prints 'held <slots>', then sleeps until killed.

usage: holds_slot.py ROOT DEVICE_KEY N_SLOTS K
"""
import sys
import time
from pathlib import Path

from kvdiag.proc.slots import SlotPool

root, key, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with SlotPool(key, n, root=Path(root)).acquire(k, timeout=10) as lease:
    print("held " + ",".join(map(str, lease.slots)), flush=True)
    while True:
        time.sleep(60)
