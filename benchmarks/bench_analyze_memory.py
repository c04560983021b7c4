"""Benchmark: peak memory and wall time of `kvdiag analyze` on a big sanitizer log.

The log is made from a recorded one (default: the synccheck walk of ggml d99724f2 on
an H200, tests/fixtures/transcripts/synccheck-hsk256-sweep.log): its banner and test
lines, then its 256 barrier-error blocks repeated until the file has the size asked
for (each repetition moves the blocks to another of 64 block indices, as a grid of
blocks would), then its abort and summary. Each path runs in a child process of its
own; its peak RSS is that child's ``ru_maxrss`` (``os.wait4``), its wall time the
child's. Paths:

* ``streaming``: `python3 -m kvdiag analyze LOG`, what users run;
* ``in-memory``: the pre-streaming path, reproduced (the whole text read, then
  ``parse_sanitizer`` and ``parse_backend_ops`` over it, the same rendering; it shares
  today's parsers, so its time is not the old code's: see docs/performance.md).

Both outputs must be byte-identical; the ratios are in-memory / streaming.
Goal (issue 28): at most 200 MB peak RSS for a 200 MB log.

    PYTHONPATH=$PWD python3 benchmarks/bench_analyze_memory.py [--mb 200] [--paths streaming,in-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "fixtures" / "transcripts" / "synccheck-hsk256-sweep.log"
GOAL_MB = 200
MARKER = "========="

IN_MEMORY = """
import sys
from pathlib import Path
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.sanitizer import instantiations, parse_sanitizer
from kvdiag.report.analysis import render_analysis
path = Path(sys.argv[1])
text = path.read_bytes().decode("utf-8", errors="replace")
report = parse_sanitizer(text)
sys.stdout.write(render_analysis(path, report, parse_backend_ops(text), instantiations(report), sys.argv[2]))
"""


def make_log(recorded: Path, target_bytes: int, out: Path) -> int:
    """Write the big log; returns its size in bytes."""
    lines = recorded.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.startswith(f"{MARKER} Barrier error"))
    last = max(i for i, ln in enumerate(lines) if ln.startswith(f"{MARKER} ") and "by thread" in ln)
    end = next(i for i in range(last, len(lines)) if lines[i].strip() == MARKER) + 1
    head, blocks, tail = "".join(lines[:first]), "".join(lines[first:end]), "".join(lines[end:])
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(head)
        written, rep = len(head), 0
        while written + len(tail) < target_bytes:
            chunk = blocks.replace("in block (0,0,0)", f"in block ({rep % 64},0,0)")
            fh.write(chunk)
            written += len(chunk)
            rep += 1
        fh.write(tail)
    return out.stat().st_size


def measure(argv: list[str]) -> tuple[float, float, bytes, float]:
    """(wall s, peak RSS MiB, stdout, CPU s) of one child (CPU time: what a loaded machine does not inflate)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{argv[:4]} exited {proc.returncode}")
        out.seek(0)
        return wall, usage.ru_maxrss / 1024, out.read(), usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200, help="size of the generated log (MB, 10^6 bytes)")
    ap.add_argument("--recorded", type=Path, default=RECORDED)
    ap.add_argument("--paths", default="streaming,in-memory")
    ap.add_argument("--format", dest="fmt", choices=("text", "json"), default="json")
    args = ap.parse_args()
    paths = args.paths.split(",")
    with tempfile.TemporaryDirectory(prefix="kvdiag-bench-analyze-") as tmp:
        log = Path(tmp) / "big-synccheck.log"
        size = make_log(args.recorded, int(args.mb * 1e6), log)
        runs = {}
        for name in paths:
            argv = ([sys.executable, "-m", "kvdiag", "analyze", str(log), "--format", args.fmt] if name == "streaming"
                    else [sys.executable, "-c", IN_MEMORY, str(log), args.fmt])
            runs[name] = measure(argv)
    result = {"log_mb": round(size / 1e6, 1), "format": args.fmt,
              **{f"{n}_wall_s": round(r[0], 2) for n, r in runs.items()},
              **{f"{n}_cpu_s": round(r[3], 2) for n, r in runs.items()},
              **{f"{n}_peak_rss_mb": round(r[1], 1) for n, r in runs.items()}, "goal_rss_mb": GOAL_MB}
    if "streaming" in runs:
        result["met"] = runs["streaming"][1] <= GOAL_MB
    if len(runs) == 2:
        (_, a), (_, b) = runs.items()
        result["identical_output"] = a[2] == b[2]
        result["rss_ratio_in_memory_over_streaming"] = round(runs["in-memory"][1] / runs["streaming"][1], 1)
        result["wall_ratio_in_memory_over_streaming"] = round(runs["in-memory"][0] / runs["streaming"][0], 2)
        result["cpu_ratio_in_memory_over_streaming"] = round(runs["in-memory"][3] / runs["streaming"][3], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
