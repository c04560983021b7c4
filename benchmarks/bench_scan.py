"""Benchmark: `kvdiag scan` of one case space under several worker/GPU layouts, in one run.

Each variant is JOBS@DEVICES[/BATCH] (`-j JOBS --devices DEVICES --batch BATCH`; -j is
per GPU; BATCH defaults to kvdiag's own, 0 = auto; /1 is one process per case). The
first variant is the baseline: every other one reports its speed-up over it, whether
its verdicts are identical case by case, and its parallel efficiency against the ideal
(sum of its per-case times / its worker count). A variant on several GPUs also reports
its speed-up over the same JOBS/BATCH on the first of them, when that ran. Every case's
device is checked against the variant's devices.

Goals: issue "Blast radius": `1@0/1 8@0/1` speed-up >= 3 and wall within 1.3x of the
ideal; issue "Multi-GPU": `8@0 8@0,1` speed-up >= 1.7, verdicts identical.

    python3 benchmarks/bench_scan.py --build B [--entry D2] [--limit 48] --variant 8@0/1 --variant 8@0 --variant 8@0,1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


def scan(build: str, entry: str, jobs: int, devices: str, limit: int | None, env, batch: str = "") -> dict:
    argv = [sys.executable, "-m", "kvdiag", "scan", entry, "--build", build, "-j", str(jobs),
            "--devices", devices, "--format", "json"] + (["--batch", batch] if batch else [])
    if limit:
        argv += ["--limit", str(limit)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"bench_scan: scan {jobs}@{devices}/{batch or 'default'} gave no JSON (rc {out.returncode}): {out.stderr.strip()[-400:]}")


def summary(name: str, jobs: int, devices: str, data: dict, base: dict | None) -> dict:
    n_dev = len(devices.split(","))
    workers = jobs * n_dev
    verdicts = {p: c["verdict"] for p, c in data["cases"].items()}
    used = sorted({str(c["device"]["index"]) for c in data["cases"].values() if c.get("device")})
    row = {"variant": name, "cases": len(verdicts), "wall_s": data["wall_s"], "sum_case_s": data["sum_case_s"],
           "ideal_wall_s": round(data["sum_case_s"] / workers, 2),
           "wall_over_ideal": round(data["wall_s"] / (data["sum_case_s"] / workers), 2),
           "affected": data["counts"]["confirmed"], "devices_used": used,
           "every_case_names_a_requested_device": all(c.get("device") and str(c["device"]["index"]) in devices.split(",")
                                                      for c in data["cases"].values()),
           "per_device": {k: {"cases": v["cases"], "affected": v["affected"]} for k, v in data["devices"].items()},
           "batch_size": data.get("batch_size"), "processes": data.get("processes"),
           "ran_alone_after_batch": data.get("ran_alone_after_batch", 0)}
    if base is not None:
        row["speedup"] = round(base["wall_s"] / data["wall_s"], 2)
        row["verdicts_identical_to_baseline"] = verdicts == {p: c["verdict"] for p, c in base["cases"].items()}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--entry", default="D2")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--variant", action="append", default=[], help="JOBS@DEVICES, e.g. 8@0 or 8@0,1 (repeatable)")
    args = ap.parse_args()
    variants = args.variant or ["1@0", "8@0"]
    env = dict(os.environ, KVDIAG_HOME=tempfile.mkdtemp(prefix="kvdiag-bench-home-"))
    # Untimed warm-up (one case): the sanitizer's control and kvdiag's caches are built once,
    # here, not inside whichever variant happens to run first.
    scan(args.build, args.entry, 1, variants[0].partition("@")[2].partition("/")[0] or "0", 1, env, "1")
    base = None
    walls: dict[tuple[str, str, str], float] = {}
    for name in variants:
        jobs, _, rest = name.partition("@")
        devices, _, batch = rest.partition("/")
        devices = devices or "0"
        data = scan(args.build, args.entry, int(jobs), devices, args.limit, env, batch)
        row = summary(name, int(jobs), devices, data, base)
        one_gpu = walls.get((jobs, devices.split(",")[0], batch))
        if "," in devices and one_gpu:
            row["speedup_over_one_gpu"] = round(one_gpu / data["wall_s"], 2)
        walls[(jobs, devices, batch)] = data["wall_s"]
        print(json.dumps(row), flush=True)
        base = base or data
    return 0


if __name__ == "__main__":
    sys.exit(main())
