#!/usr/bin/env python3
"""Stands in for nvcc in the controls' tests: ``--version``, or writes a dummy ``-o`` file."""
import sys
from pathlib import Path

args = sys.argv[1:]
if "--version" in args:
    print("nvcc: NVIDIA (R) Cuda compiler driver")
    print("Cuda compilation tools, release 13.0, V13.0.88")
    sys.exit(0)
Path(args[args.index("-o") + 1]).write_bytes(b"\x7fELF fake cubin for " + args[-1].encode())
