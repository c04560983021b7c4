"""Benchmark: where a sanitizer record's time goes, one op's cases run raw under each flag pair.

A tree with a defect that reports in every thread (D2's divergent barrier prints thousands of
synccheck records a case) spends its discovery time in the sanitizer's reporting, not in the
kernels. This runs the same cases once without a sanitizer and once per variant, in one run, so
the differences say what a record costs and which flag removes it:

    python3 benchmarks/bench_sanitizer_flags.py --build B --tool synccheck --op FLASH_ATTN_EXT \
        --params 'hsk=64,hsv=64,nh=4,nr23=\\[1,1\\],kv=512,nb=3,' \
        [--variant device:0 --variant no:0 --variant device:1 --variant no:1] --out flags.json

A variant is ``BACKTRACE:LIMIT``: the sanitizer's ``--show-backtrace`` and ``--print-limit``
(0 prints every record, as discovery does; 1 prints one, so what is left is detecting them).
Each row gives the wall, the exit status, the lines printed, the record blocks printed, the
tool's own error count (its ERROR SUMMARY, which counts unprinted records too), and
``per_error_ms``: (wall − the plain wall) / errors. Times are wall seconds on this machine;
compare only numbers from one run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvdiag.engine.discover.batch import DESTROYS

DEFAULT_VARIANTS = ("device:0", "no:0", "device:1", "no:1")
BACKTRACES = ("no", "host", "device", "yes")
RECORD = re.compile(r"^={9} (?:Error|Warning|Invalid|Barrier error|Uninitialized|Race reported)", re.M)
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")


def parse_variant(text: str) -> tuple[str, int]:
    """``device:0`` -> ("device", 0); anything else is a usage error naming the form."""
    backtrace, _, limit = text.partition(":")
    if backtrace not in BACKTRACES or not limit.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected BACKTRACE:LIMIT, BACKTRACE one of "
                                         f"{', '.join(BACKTRACES)} and LIMIT a whole number (0 = every record)")
    return backtrace, int(limit)


def run_once(argv: list[str], log: Path, cap: float) -> dict:
    """``argv`` in its own session, its output to ``log``; the whole group killed at ``cap``."""
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=cap)
            cut = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            cut = True
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    summary = SUMMARY.findall(text)
    return {"wall_s": round(wall, 2), "cut": cut, "returncode": proc.returncode,
            "lines": text.count("\n"), "records_printed": len(RECORD.findall(text)),
            "errors": int(summary[-1]) if summary else None, "log": str(log)}


def measure(binary: Path, sanitizer: str, tool: str, op: str, params: str | None,
            variants: list[tuple[str, int]], cap: float, logs: Path) -> dict:
    """The plain run, then each variant, one after the other (never two at once: they would share
    the host's cores, which is what is being measured). A finding destroys only its kernel, as in
    discovery (``--destroy-on-device-error kernel`` where discover passes it): the tool's default
    destroys the context at the first record, and the process ends there."""
    cases = [str(binary), "test", "-b", "CUDA0", "-o", op, *(["-p", params] if params else [])]
    rows = {"plain": run_once(cases, logs / "plain.log", cap)}
    for backtrace, limit in variants:
        name = f"{backtrace}:{limit}"
        destroy = ["--destroy-on-device-error", DESTROYS[tool]] if tool in DESTROYS else []
        rows[name] = run_once([sanitizer, "--tool", tool, *destroy, "--show-backtrace", backtrace,
                               "--print-limit", str(limit), *cases], logs / f"{backtrace}-{limit}.log", cap)
    plain = rows["plain"]["wall_s"]
    for name, row in rows.items():
        if name != "plain" and row["errors"]:
            row["per_error_ms"] = round((row["wall_s"] - plain) / row["errors"] * 1000, 3)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--tool", default="synccheck")
    ap.add_argument("--op", required=True)
    ap.add_argument("--params", help="test-backend-ops -p (a regex over the case's parameters)")
    ap.add_argument("--variant", action="append", type=parse_variant,
                    help=f"BACKTRACE:LIMIT, repeatable (default: {' '.join(DEFAULT_VARIANTS)})")
    ap.add_argument("--cap", type=float, default=150.0, help="seconds before a run's group is killed")
    ap.add_argument("--sanitizer", default="compute-sanitizer")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    binary = args.build / "bin" / "test-backend-ops"
    if not binary.is_file():
        print(f"bench_sanitizer_flags: no test-backend-ops at {binary}", file=sys.stderr)
        return 2
    variants = args.variant or [parse_variant(v) for v in DEFAULT_VARIANTS]
    logs = Path(tempfile.mkdtemp(prefix="kvdiag-bench-flags-"))
    report = {"tool": args.tool, "op": args.op, "params": args.params, "cap_s": args.cap,
              "variants": measure(binary, args.sanitizer, args.tool, args.op, args.params, variants, args.cap, logs)}
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
