#!/usr/bin/env python3
"""A hang: one case prints OK, the next case's prefix is flushed, then the program forks a
grandchild (its pid written to <build>/grandchild.pid) and both sleep forever."""
import os
import time

import fakeops

fakeops.handle_probes()
fakeops.header()
fakeops.case(fakeops.EARLIER_CASE)
fakeops.out(f"  FLASH_ATTN_EXT({fakeops.D2_CASE}): ", end="")
pid = os.fork()
if pid == 0:
    while True:
        time.sleep(60)
tmp = fakeops.BUILD / "grandchild.pid.tmp"
tmp.write_text(str(pid))
os.replace(tmp, fakeops.BUILD / "grandchild.pid")
while True:
    time.sleep(60)
