"""Benchmark: wall time of `kvdiag list` against a bare `python3 -c pass`.

`kvdiag list` is the first thing a user runs; its start-up is import time plus
reading the registry. Both commands are timed interleaved in one process, so the
absolute median and the ratio to the interpreter's own start are measured under
the same machine state. Goal (issue "One-way architecture"): median <= 0.3 s.

    PYTHONPATH=$PWD python3 benchmarks/bench_list_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

GOAL_S = 0.3


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    bare, listed = [], []
    timed([sys.executable, "-m", "kvdiag", "list"])          # warm the file cache and .pyc files
    for _ in range(args.repeat):
        bare.append(timed([sys.executable, "-c", "pass"]))
        listed.append(timed([sys.executable, "-m", "kvdiag", "list"]))
    median = statistics.median(listed)
    print(json.dumps({"median_list_s": round(median, 3), "median_bare_python_s": round(statistics.median(bare), 3),
                      "ratio": round(median / statistics.median(bare), 2), "goal_s": GOAL_S,
                      "met": median <= GOAL_S}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
