#!/usr/bin/env python3
"""A fake compute-sanitizer for the engine tests (installed as `<dir>/compute-sanitizer`).

argv as kvdiag builds it (kvdiag/proc/sanitizer.py):
    compute-sanitizer --tool T --log-file F --error-exitcode N [--opt VALUE ...] PROGRAM ARGS...
(every option takes one value; `%%` in F stands for `%`). `--version` prints a version.

The mode is read from `compute-sanitizer.mode` next to the installed copy:

follow      run PROGRAM with a channel file in its environment; write to F the banner,
            whatever findings the program put in the channel, and the summary lines
            (`ERROR SUMMARY: 0 errors` when the channel brought none). Exit like the real
            tool: the program's status when it failed (the signal number when it died by
            one, as recorded), N when it succeeded but errors were reported, else 0.
no-summary  run PROGRAM, write the banner and the channel's findings without any summary
            line (the program's own ones dropped), then die by SIGKILL: a tool that did not
            finish its report.
tool-error  do not run PROGRAM; write the tool's own failure (`Error: Device not supported`)
            followed by `ERROR SUMMARY: 0 errors`, exit 1.
"""
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

MARKER = "========="
CHANNEL_ENV = "KVDIAG_FAKE_SANITIZER_CHANNEL"

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
log_file = Path(opts["--log-file"].replace("%%", "%"))
error_exitcode = int(opts.get("--error-exitcode", "0"))
mode_file = Path(__file__).resolve().with_name("compute-sanitizer.mode")
mode = mode_file.read_text().strip() if mode_file.exists() else "follow"
banner = f"{MARKER} COMPUTE-SANITIZER\n"

if mode == "tool-error":
    log_file.write_text(banner
                        + f"{MARKER} Error: Device not supported. Please refer to the \"Supported Devices\" section "
                          "of the sanitizer documentation\n"
                        + f"{MARKER} ERROR SUMMARY: 0 errors\n")
    sys.exit(1)

channel = str(log_file.with_name(log_file.name + ".channel"))
Path(channel).write_text("")
try:
    rc = subprocess.call(program, env={**os.environ, CHANNEL_ENV: channel})
    seen = Path(channel).read_text()
finally:
    os.unlink(channel)

if mode == "no-summary":
    findings = [line for line in seen.splitlines(keepends=True) if "SUMMARY" not in line]
    log_file.write_text(banner + "".join(findings))
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

lines = [banner, seen]
if rc != 0 and "process didn't terminate successfully" not in seen:
    lines.append(f"{MARKER} Error: process didn't terminate successfully\n")
    lines.append(f"{MARKER} Target application returned an error\n")
if "ERROR SUMMARY" not in seen:
    lines.append(f"{MARKER} ERROR SUMMARY: 0 errors\n")
log_file.write_text("".join(lines))
m = re.search(r"ERROR SUMMARY: (\d+) error", seen)
errors = int(m.group(1)) if m else 0
if rc < 0:
    sys.exit(-rc)
if rc != 0:
    sys.exit(rc)
sys.exit(error_exitcode if errors else 0)
