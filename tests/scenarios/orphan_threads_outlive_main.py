"""Stages an orphan whose main thread exits while another thread lives on.

Run plainly, it starts a copy of itself as ``child`` in its own process group,
prints ``orphan <pid>`` and exits at once, so the child is re-parented to the
runner (the subreaper). The child starts a thread that sleeps ``--linger``
seconds (default 1.0) and then ends the process, and ends its own main thread
with pthread_exit(). Meanwhile /proc shows the child as a zombie ("Z") that
waitpid() cannot take yet: the kernel hands a thread-group leader over only
when its last thread is gone.
"""

import ctypes
import os
import subprocess
import sys
import threading
import time

if sys.argv[1:2] == ["child"]:
    linger = float(sys.argv[2])

    def last_thread():
        time.sleep(linger)
        os._exit(0)

    threading.Thread(target=last_thread).start()
    time.sleep(0.1)
    ctypes.CDLL(None).pthread_exit(None)   # releases the GIL: the other thread runs on
else:
    linger = sys.argv[sys.argv.index("--linger") + 1] if "--linger" in sys.argv else "1.0"
    child = subprocess.Popen([sys.executable, __file__, "child", linger])
    print(f"orphan {child.pid}", flush=True)
    time.sleep(0.3)                        # the child's main thread has exited by now
    os._exit(0)
