"""Stages a launcher in front of a server, shaped like compute-sanitizer.

``sanitizer_like_launcher.py --log-file F -- PROGRAM ARGS...`` runs the program
as its child (same process group) and, when the child exits, writes a summary
line to F (``========= ERROR SUMMARY: 0 errors``) and exits with the child's
code. If the launcher itself is sent SIGTERM it dies at once without writing the
summary, as a real tool can when the whole group is signalled.
"""

import os
import signal
import subprocess
import sys

args = sys.argv[1:]
log_file = args[args.index("--log-file") + 1]
program = args[args.index("--") + 1:]
signal.signal(signal.SIGTERM, lambda s, f: os._exit(143))
child = subprocess.Popen(program)
code = child.wait()
with open(log_file, "w") as fh:
    fh.write("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
sys.exit(code if code >= 0 else 128 - code)
