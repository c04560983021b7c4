#!/usr/bin/env python3
"""Stands in for compute-sanitizer: understands --version, --tool, --log-file and
--error-exitcode, runs the program, writes a one-error report to the log file and
exits with the error exit code (like the real tool when it finds an error)."""
import subprocess
import sys

args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer")
    print("Copyright (c) 2020-2025 NVIDIA Corporation")
    print("Version 2025.3.1.0 (build 36398583) (public-release)")
    sys.exit(0)
opts = {}
i = 0
while i < len(args) and args[i].startswith("--"):
    opts[args[i]] = args[i + 1]
    i += 2
program = args[i:]
rc = subprocess.call(program)
with open(opts["--log-file"].replace("%%", "%"), "w") as f:
    f.write(f"========= COMPUTE-SANITIZER ({opts['--tool']})\n")
    f.write("========= Invalid __global__ read of size 4 bytes\n")
    f.write("========= ERROR SUMMARY: 1 error\n")
sys.exit(int(opts.get("--error-exitcode", rc)) if rc == 0 else rc)
