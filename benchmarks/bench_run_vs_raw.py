"""Benchmark: wall time of `kvdiag run D2` against the raw sanitizer command it wraps.

Both are timed in the same process, interleaved (raw, kvdiag, raw, kvdiag, …), so
the ratio is measured under the same machine state. The raw command is the one
kvdiag itself would run (taken from `kvdiag show D2 --build B --format json`),
so the comparison is like for like. Goal (issue "Engine"): median ratio <= 1.5.

    python3 benchmarks/bench_run_vs_raw.py --build path/to/build [--repeat 3] [--entry D2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def kvdiag(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvdiag", *args], capture_output=True, text=True, env=env)


def timed(argv, env=None) -> tuple[float, int]:
    t0 = time.perf_counter()
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
    return time.perf_counter() - t0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--entry", default="D2")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    shown = json.loads(kvdiag("show", args.entry, "--build", args.build, "--format", "json").stdout)
    step = shown["commands"]["commands"][0]
    raw = step["argv"][0]
    log = tempfile.mktemp(prefix="kvdiag-bench-", suffix=".log")
    raw = [log if a == "<run-dir>/sanitizer.log" else a for a in raw]
    env = dict(os.environ, KVDIAG_HOME=tempfile.mkdtemp(prefix="kvdiag-bench-home-"))
    raws, runs = [], []
    for i in range(args.repeat):
        t, rc_raw = timed(raw)
        raws.append(t)
        t, rc_kv = timed([sys.executable, "-m", "kvdiag", "run", args.entry, "--build", args.build, "--quiet"], env)
        runs.append(t)
        print(f"round {i + 1}: raw {raws[-1]:.2f} s (rc {rc_raw}), kvdiag {runs[-1]:.2f} s (rc {rc_kv})")
    ratio = statistics.median(runs) / statistics.median(raws)
    print(json.dumps({"entry": args.entry, "raw_s": raws, "kvdiag_s": runs,
                      "median_raw_s": statistics.median(raws), "median_kvdiag_s": statistics.median(runs),
                      "ratio": round(ratio, 3), "goal": 1.5, "met": ratio <= 1.5}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
