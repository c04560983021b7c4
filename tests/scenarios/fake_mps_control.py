#!/usr/bin/env python3
"""Stands in for nvidia-cuda-mps-control: ``-d`` "starts" a daemon (a line in $FAKE_MPS_JOURNAL with the
pipe folder it was given), a ``quit`` on standard input "stops" it (another line). $FAKE_MPS_FAIL set:
``-d`` says why on stderr and exits 1, as a machine without MPS would."""

import os
import sys

journal = os.environ["FAKE_MPS_JOURNAL"]
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
if sys.argv[1:] == ["-d"]:
    if os.environ.get("FAKE_MPS_FAIL"):
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    with open(journal, "a") as out:
        out.write(f"started {pipe}\n")
    sys.exit(0)
command = sys.stdin.read().strip()
with open(journal, "a") as out:
    out.write(f"{command} {pipe}\n")
