"""Shared part of the fake ``test-backend-ops`` programs (the ``backend_ops_*.py`` scenarios).

A scenario build is made in ``tmp_path`` by ``tests/engine/engine_helpers.py``:
``bin/test-backend-ops`` is a copy of one scenario, this module sits next to it
(not executable, so it is not a program of the build), and ``fake-data/`` holds
the recorded texts the fakes print (upstream's usage text, the H200 transcript).

Under the fake compute-sanitizer (``tests/scenarios/fake_compute_sanitizer.py``) the environment names
a *channel* file: a fake writes there what the sanitizer "sees" in its kernels
(the ``=========`` finding blocks), and the sanitizer copies that into its
``--log-file``. Run bare (no sanitizer), a fake has no channel, exactly like a
real program whose divergent barrier nobody checks.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import time
from pathlib import Path

BIN = Path(__file__).resolve().parent
BUILD = BIN.parent
DATA = BUILD / "fake-data"
CHANNEL_ENV = "KVDIAG_FAKE_SANITIZER_CHANNEL"
MARKER = "========="

D2_CASE = ("hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,"
           "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
EARLIER_CASE = ("hsk=128,hsv=128,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,"
                "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]")
OPS = ("ABS", "ADD", "FLASH_ATTN_EXT", "MUL_MAT", "SOFT_MAX", "SWIGLU")
GREEN_OK = "\x1b[1;32mOK\x1b[0m"
RED_FAIL = "\x1b[1;31mFAIL\x1b[0m"

# Lines of the recorded transcript that test-backend-ops writes to stdout (printf);
# ggml's logging, CUDA errors and the abort's backtrace go to stderr.
_STDOUT_LINE = re.compile(r"^(Testing \d+ devices|Backend \d+/\d+:|  Device (description|memory):|  [A-Z_]+\(|$)")
_SITE = re.compile(r" in [^\s:]+:\d+$")


# --------------------------------------------------------------------------- argv

def handle_probes(ops: tuple[str, ...] = OPS, modes: tuple[str, ...] = ("test", "perf", "grad", "support")) -> None:
    """``--help`` prints upstream's usage and exits 1 (upstream has no --help: any
    unknown option does that); ``--list-ops`` lists the ops and exits 0."""
    args = sys.argv[1:]
    if args == ["--list-ops"]:
        out("GGML operations:")
        for op in ops:
            out(f"  {op}")
        out(f"\nTotal: {len(ops)} operations")
        sys.exit(0)
    if not args or args[0] not in modes:
        sys.stdout.write((DATA / "help-upstream.txt").read_text())
        sys.stdout.flush()
        sys.exit(1)


def option(name: str, default: str | None = None) -> str | None:
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else default


def case_space(default: list[str]) -> list[str]:
    """The lines of `<build>/case-space.txt` when a test wrote one, else the program's own cases."""
    custom = BUILD / "case-space.txt"
    if custom.is_file():
        return [line.strip() for line in custom.read_text().splitlines() if line.strip()]
    return default


def selected(cases: list[str]) -> list[str]:
    """The cases the ``-p`` regex selects (std::regex_search semantics)."""
    pattern = option("-p")
    return [c for c in cases if pattern is None or re.search(pattern, c)]


# --------------------------------------------------------------------------- output

def out(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


def err(text: str = "", end: str = "\n") -> None:
    sys.stderr.write(text + end)
    sys.stderr.flush()


def init_lines() -> None:
    err("ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143155 MiB):")
    err("  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143155 MiB")


def header() -> None:
    init_lines()
    out("Testing 2 devices")
    out()
    out("Backend 1/2: CUDA0")
    out("  Device description: NVIDIA H200")
    out("  Device memory: 143155 MB (142509 MB free)")
    out()


def case(params: str, status: str = GREEN_OK, op: str = "FLASH_ATTN_EXT") -> None:
    out(f"  {op}({params}): {status}")


def footer(passed: int, total: int) -> None:
    ok = passed == total
    out(f"  {passed}/{total} tests passed")
    out(f"  Backend CUDA0: {GREEN_OK if ok else RED_FAIL}")
    out("Backend 2/2: CPU")
    out("  Skipping")
    out(f"{2 if ok else 1}/2 backends passed")
    out(GREEN_OK if ok else RED_FAIL)


def die(sig: str = "SIGABRT") -> None:
    """Flush, no core file, and die by the signal (os.abort for SIGABRT)."""
    sys.stdout.flush()
    sys.stderr.flush()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig == "SIGABRT":
        os.abort()
    import signal
    os.kill(os.getpid(), getattr(signal, sig))
    time.sleep(5)
    os._exit(99)  # not reached


# --------------------------------------------------------------------------- the sanitizer's view

def under_sanitizer() -> bool:
    return bool(os.environ.get(CHANNEL_ENV))


def lineinfo() -> bool:
    """Whether this fake build was configured with -lineinfo (sites then have file:line)."""
    cache = BUILD / "CMakeCache.txt"
    return cache.is_file() and "-lineinfo" in cache.read_text()


def sanitizer_sees(lines: list[str]) -> None:
    """Hand finding lines (with their ``=========`` marker) to the fake sanitizer, if one runs us.

    When the sanitizer reports on stdout (no --log-file), the lines are also printed here,
    now, into the program's own stdout: the real tool's report lands in the same terminal
    at the moment the kernel finishes."""
    channel = os.environ.get(CHANNEL_ENV)
    if not channel:
        return
    if not lineinfo():
        lines = [_SITE.sub("", line) for line in lines]
    if streamed_report():
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    with open(channel, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def streamed_report() -> bool:
    """The sanitizer writes its report into our stdout (kvdiag's scan batches)."""
    return bool(os.environ.get("KVDIAG_FAKE_SANITIZER_STREAM"))


def device_frames() -> bool:
    """The sanitizer prints each record's device frames (--show-backtrace yes or device; no: none)."""
    return os.environ.get("KVDIAG_FAKE_SANITIZER_BACKTRACE", "yes") in ("yes", "device")


def destroy_on_device_error() -> str:
    """What the sanitizer does on a device error: end the context (default) or only the kernel."""
    return os.environ.get("KVDIAG_FAKE_SANITIZER_DESTROY", "context")


def invocation_number() -> int:
    """How many times this build's program ran in test mode, this run included (a file counts)."""
    counter = BUILD / "invocations"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n


# --------------------------------------------------------------------------- the recorded D2 run

def recorded(name: str = "synccheck-single-case.log") -> tuple[list[str], list[str]]:
    """(program lines, sanitizer lines) of a recorded transcript; the shell's `time` lines dropped."""
    program, sanitizer = [], []
    for line in (DATA / name).read_text().splitlines():
        if line.startswith(("real\t", "user\t", "sys\t")):
            continue
        if MARKER in line:
            head, _, _ = line.partition(MARKER)
            if head:
                program.append(head)
            sanitizer.append(line[line.index(MARKER):])
        else:
            program.append(line)
    while program and not program[-1]:
        program.pop()
    return program, sanitizer


def replay_divergence(name: str = "synccheck-single-case.log") -> None:
    """Print the program's part of the recorded run, feed the sanitizer its findings, abort.

    Like the real kernel, the barrier errors are only seen under the sanitizer; the
    fake tells it what it saw and then dies as the recorded process did.
    """
    program, sanitizer = recorded(name)
    banner = f"{MARKER} COMPUTE-SANITIZER"
    sanitizer_sees([line for line in sanitizer if line != banner])
    for line in program:
        (out if _STDOUT_LINE.match(line) else err)(line)
    die("SIGABRT")
