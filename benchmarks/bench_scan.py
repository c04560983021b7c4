"""Benchmark: `kvdiag scan` of a case space at -j 1 and -j N, in one run.

Reports wall times, the sum of per-case times, the speed-up and the parallel
efficiency against the ideal (sum of per-case times / workers). Goal (issue
"Blast radius"): speed-up >= 3 at -j 8, and wall within 1.3x of the ideal.

    python3 benchmarks/bench_scan.py --build path/to/build [--entry D2] [--jobs 8] [--limit 48]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


def scan(build: str, entry: str, jobs: int, limit: int | None, env) -> dict:
    argv = [sys.executable, "-m", "kvdiag", "scan", entry, "--build", build, "-j", str(jobs), "--format", "json"]
    if limit:
        argv += ["--limit", str(limit)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--entry", default="D2")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    env = dict(os.environ, KVDIAG_HOME=tempfile.mkdtemp(prefix="kvdiag-bench-home-"))
    one = scan(args.build, args.entry, 1, args.limit, env)
    many = scan(args.build, args.entry, args.jobs, args.limit, env)
    ideal = many["sum_case_s"] / args.jobs
    same = {p: c["verdict"] for p, c in one["cases"].items()} == {p: c["verdict"] for p, c in many["cases"].items()}
    result = {
        "cases": len(one["cases"]), "j1_wall_s": one["wall_s"], "j1_sum_case_s": one["sum_case_s"],
        f"j{args.jobs}_wall_s": many["wall_s"], f"j{args.jobs}_sum_case_s": many["sum_case_s"],
        "speedup": round(one["wall_s"] / many["wall_s"], 2), "ideal_wall_s": round(ideal, 2),
        "wall_over_ideal": round(many["wall_s"] / ideal, 2), "verdicts_identical": same,
        "affected_j1": one["counts"]["confirmed"], f"affected_j{args.jobs}": many["counts"]["confirmed"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
