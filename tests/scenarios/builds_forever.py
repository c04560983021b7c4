#!/usr/bin/env python3
"""A build step that never ends: prints its TERM and ninja's first status lines, then hangs with a compiler child.

usage: builds_forever.py [PIDFILE]   (PIDFILE gets this process's pid and its child's, one a line)
"""
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as fh:
        fh.write(f"{__import__('os').getpid()}\n{child.pid}\n")
print(f"TERM={__import__('os').environ.get('TERM')}", flush=True)
for n in range(1, 4):
    print(f"[{n}/120] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/fattn-{n}.cu.o", flush=True)
    time.sleep(0.05)
while True:
    time.sleep(60)
