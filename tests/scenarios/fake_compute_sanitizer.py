#!/usr/bin/env python3
"""The one fake compute-sanitizer of the tests: runs nothing on a GPU.

The engine tests install a copy as `<dir>/compute-sanitizer`; the controls and proc
tests run this file directly.

argv as kvdiag builds it (kvdiag/proc/sanitizer.py):
    compute-sanitizer --tool T --log-file F --error-exitcode N [--opt VALUE ...] PROGRAM ARGS...
(every option takes one value; `%%` in F stands for `%`). `--version` prints a version.

The mode is $KVDIAG_FAKE_SANITIZER_MODE, else the word in `compute-sanitizer.mode` next to
the installed copy, else `recorded` when $FAKE_SANITIZER_LOGS is set, else `follow`:

follow      run PROGRAM with a channel file in its environment; write to F the banner,
            whatever findings the program put in the channel, and the summary lines
            (`ERROR SUMMARY: 0 errors` when the channel brought none; a racecheck summary
            the program handed over is the only one, as racecheck prints). Exit like the real
            tool: the program's status when it failed (the signal number when it died by
            one, as recorded), N when it succeeded but errors were reported, else 0.
no-summary  run PROGRAM, write the banner and the channel's findings without any summary
            line (the program's own ones dropped), then die by SIGKILL: a tool that did not
            finish its report.
tool-error  do not run PROGRAM; write the tool's own failure (`Error: Device not supported`)
            followed by `ERROR SUMMARY: 0 errors`, exit 1.

Without --log-file the report goes to stdout, as the real tool's does: the program is
told (KVDIAG_FAKE_SANITIZER_STREAM) to print its findings itself as they happen, into the
same terminal, and the summary that follows counts them (each record, and each "Error
buffer overflow" warning, counts one: the real tool's count). --destroy-on-device-error
reaches the program as KVDIAG_FAKE_SANITIZER_DESTROY (the real default is context), and
--show-backtrace as KVDIAG_FAKE_SANITIZER_BACKTRACE (the real default, yes, prints frames).

recorded    the controls' tests: PROGRAM is `python -m kvdiag.controls.launch NAME --cubin C`
            or an nvcc-built canary program `<cache>/NAME-<hash>.exe ARGS`;
            copy $FAKE_SANITIZER_LOGS/NAME.log (a recorded report) to F, print the
            launcher's JSON line when NAME.launcher says `ok`, record argv in NAME.argv,
            and exit N when the report counts errors.
one-error   run PROGRAM, write a one-error memcheck report to F, exit N (or the
            program's status when it failed).
hangs       a tool that never finishes: start a child that leaves the session (setsid)
            and hangs, append "<own pid> <child pid>" to `pids` next to the installed
            copy (one line per run: how many controls started), never run PROGRAM, hang.
canaries-hang  `hangs` when PROGRAM is one of kvdiag's canaries (an nvcc-built `*.exe`, or
            `python -m kvdiag.controls.launch`), `follow` otherwise: a control that hangs
            after the step it would prove ran clean.
"""
import json
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


def streamed() -> None:
    """The report on stdout, interleaved with the program's own output."""

    def say(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    say(f"{MARKER} COMPUTE-SANITIZER\n")
    if mode == "tool-error":
        say(f"{MARKER} Error: Device not supported.\n{MARKER} ERROR SUMMARY: 0 errors\n")
        sys.exit(1)
    # The channel lives beside this fake (in the test's tmp_path), never in /tmp, and goes with it.
    channel = Path(__file__).resolve().with_name(f"stream-channel-{os.getpid()}")
    channel.write_text("")
    try:
        rc = subprocess.call(program, env={**os.environ, CHANNEL_ENV: str(channel),
                                           "KVDIAG_FAKE_SANITIZER_STREAM": "1",
                                           "KVDIAG_FAKE_SANITIZER_TOOL": opts.get("--tool", ""),
                                           "KVDIAG_FAKE_SANITIZER_DESTROY": opts.get("--destroy-on-device-error",
                                                                                     "context"),
                                           "KVDIAG_FAKE_SANITIZER_BACKTRACE": opts.get("--show-backtrace", "yes")})
        seen = channel.read_text()
    finally:
        channel.unlink(missing_ok=True)
    if mode == "no-summary":
        os.kill(os.getpid(), signal.SIGKILL)
    if rc != 0:
        say(f"{MARKER} Error: process didn't terminate successfully\n{MARKER} Target application returned an error\n")
    errors = sum(1 for line in seen.splitlines() if re.match(rf"^{MARKER} \S", line))
    say(f"{MARKER} ERROR SUMMARY: {errors} error{'' if errors == 1 else 's'}\n")
    sys.exit(-rc if rc < 0 else rc if rc else (error_exitcode if errors else 0))


def recorded() -> None:
    """Replay a recorded report for the canary the controls launched."""
    if "kvdiag.controls.launch" in program:
        name, launcher = program[program.index("kvdiag.controls.launch") + 1], "cupy"
    else:  # an nvcc-built canary program: <cache>/<name>-<hash>.exe n bx by bz gx gy gz init
        name, launcher = Path(program[0]).name.rsplit("-", 1)[0], "nvcc-exe"
    logs = Path(os.environ["FAKE_SANITIZER_LOGS"])
    (logs / f"{name}.argv").write_text(json.dumps(sys.argv), encoding="utf-8")
    text = (logs / f"{name}.log").read_text(encoding="utf-8")
    log_file.write_text(text, encoding="utf-8")
    if (logs / f"{name}.launcher").read_text(encoding="utf-8").strip() == "ok":
        print(json.dumps({"launcher": launcher, "kernel": name, "ok": True}))
    m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"\((\d+) errors?,", text)
    sys.exit(error_exitcode if m and int(m.group(1)) else 0)


def one_error() -> None:
    rc = subprocess.call(program)
    log_file.write_text(f"{MARKER} COMPUTE-SANITIZER ({opts['--tool']})\n"
                        f"{MARKER} Invalid __global__ read of size 4 bytes\n"
                        f"{MARKER} ERROR SUMMARY: 1 error\n")
    sys.exit(error_exitcode if rc == 0 else rc)


mode_file = Path(__file__).resolve().with_name("compute-sanitizer.mode")
mode = (os.environ.get("KVDIAG_FAKE_SANITIZER_MODE")
        or (mode_file.read_text().strip() if mode_file.exists() else None)
        or ("recorded" if "FAKE_SANITIZER_LOGS" in os.environ else "follow"))
error_exitcode = int(opts.get("--error-exitcode", "0"))


def hang() -> None:
    """The `hangs` mode: a setsid'd child and this process both hang; their pids are written first."""
    child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    pids = Path(__file__).resolve().with_name("pids")
    before = pids.read_text(encoding="utf-8") if pids.exists() else ""
    partial = pids.with_name(f"pids.{os.getpid()}.tmp")        # a reader never sees half a line
    partial.write_text(f"{before}{os.getpid()} {child.pid}\n", encoding="utf-8")
    os.replace(partial, pids)
    signal.pause()
    sys.exit(1)


if mode == "hangs" or (mode == "canaries-hang" and program
                       and (program[0].endswith(".exe") or "kvdiag.controls.launch" in program)):
    hang()
if mode == "canaries-hang":
    mode = "follow"
if "--log-file" not in opts:
    streamed()
log_file = Path(opts["--log-file"].replace("%%", "%"))
if mode == "recorded":
    recorded()
if mode == "one-error":
    one_error()
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
    rc = subprocess.call(program, env={**os.environ, CHANNEL_ENV: channel,
                                       "KVDIAG_FAKE_SANITIZER_TOOL": opts.get("--tool", "")})
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
if "ERROR SUMMARY" not in seen and "RACECHECK SUMMARY" not in seen:   # racecheck's is its only summary
    lines.append(f"{MARKER} ERROR SUMMARY: 0 errors\n")
log_file.write_text("".join(lines))
m = re.search(r"ERROR SUMMARY: (\d+) error", seen) or re.search(r"RACECHECK SUMMARY: .*\((\d+) errors?,", seen)
errors = int(m.group(1)) if m else 0
if rc < 0:
    sys.exit(-rc)
if rc != 0:
    sys.exit(rc)
sys.exit(error_exitcode if errors else 0)
