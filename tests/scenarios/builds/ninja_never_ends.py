#!/usr/bin/env python3
"""Stand-in ninja: prints its first status line, starts a compiler child (both pids appended to
$FAKE_NINJA_PIDS) and never ends."""
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeninja import main  # noqa: E402


def build(build_dir: Path, objects: list[str]) -> int:
    print(f"[1/{len(objects)}] Building CUDA object {objects[0]}", flush=True)
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    with open(os.environ["FAKE_NINJA_PIDS"], "a") as fh:
        fh.write(f"{os.getpid()} {child.pid}\n")
    while True:
        time.sleep(1)


main(build)
