"""Benchmark: `kvdiag scan` of one case space under several worker/GPU layouts and programs, in one run.

Each variant is JOBS@DEVICES[/BATCH][:PROGRAM][+OPTION...] (`-j JOBS --devices DEVICES --batch
BATCH --program PROGRAM`; -j is per GPU; BATCH defaults to kvdiag's own, 0 = auto; /1 is one
process per case; PROGRAM is `plain`, the build's own test-backend-ops with its CPU
reference, or `auto`, the launch probe's build of it: GPU-only `launch` mode for sanitized
cases, every launch listed). OPTIONs: `noroute` (`--no-route`: every case sanitized, the
path before routing), `route` (the default: route, then sanitize what reaches the entry's
kernels), `entry` (`--instrument entry`: the sanitizer instruments only the entry's kernels),
`bykernel` (`--batch-order by-kernel`: the sanitized batches hold cases that launched the same
kernels in the route phase), `routejN` (`--route-jobs N`: N processes for the route phase),
`slotsN` (`KVDIAG_GPU_SLOTS=N` for that variant: N GPU processes at once instead of one per
16 GiB, at most 8), `initN` (`benchmarks/shims/init_threads.c`, built once with ``cc``, preloaded for that
variant: each test-backend-ops process fills its inputs on N threads instead of one per core; the row's
`init_threads` says how many processes the shim answered), `overlap` / `nooverlap` (`--overlap` / `--no-overlap`, kvdiag's default: the detect phase starts
on each batch as its cases are routed, or once every case is routed).
A routed variant prints each phase's cases, processes and wall (`route_*`, `detect_*`; overlapped,
the detect wall runs from its first batch), whether the phases overlapped (`overlap`), and
the cases whose launches differed between the phases. The first variant is the baseline: every other one reports
its speed-up over it (`speedup`, baseline wall / its wall: the old path against the new
one when the baseline is `:plain`), whether its affected set and its verdicts are identical
case by case, and its parallel efficiency against the ideal (sum of its per-case times /
its worker count). A variant on several GPUs also reports its speed-up over the same
JOBS/BATCH on the first of them, when that ran. Every case's device is checked against
the variant's devices.

An untimed warm-up (one case, program auto) runs first: the sanitizer's control, kvdiag's
caches and the launch probe's program (one file compiled, relinked, kept) are made there,
not inside whichever variant runs first; its cost is printed as `warmup_s`.

Goals: issue "Blast radius": `1@0/1 8@0/1` speed-up >= 3 and wall within 1.3x of the
ideal; issue "Multi-GPU": `8@0 8@0,1` speed-up >= 1.7, verdicts identical; issue #25:
`--params hsk 8@0:auto+noroute 8@0:auto` the routed path's wall <= 60 s with the same
affected set, case by case (`affected_identical_to_baseline`, and the cases on either side
only, `affected_only_in_baseline` / `affected_only_here`).

    python3 benchmarks/bench_scan.py --build B [--entry D2] [--op OP] [--params hsk] [--limit 48] \
        --variant 8@0:auto+noroute --variant 8@0:auto --variant 8@0:auto+entry
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time


OPTIONS = {"noroute": ["--no-route"], "route": ["--route"], "entry": ["--instrument", "entry"],
           "bykernel": ["--batch-order", "by-kernel"], "overlap": ["--overlap"], "nooverlap": ["--no-overlap"]}


def scan(build: str, entry: str, jobs: int, devices: str, limit: int | None, env, batch: str = "",
         program: str = "", params: str | None = None, options: tuple[str, ...] = (), op: str | None = None) -> dict:
    argv = [sys.executable, "-m", "kvdiag", "scan", entry, "--build", build, "-j", str(jobs),
            "--devices", devices, "--format", "json"] + (["--batch", batch] if batch else [])
    argv += (["--program", program] if program else []) + (["--params", params] if params else [])
    argv += ["--op", op] if op else []
    init_threads, init_log = "", ""
    for option in options:
        if option.startswith("routej") and option[6:].isdigit():
            argv += ["--route-jobs", option[6:]]
            continue
        if option.startswith("slots") and option[5:].isdigit():
            env = dict(env, KVDIAG_GPU_SLOTS=option[5:])    # this variant's slot pool only
            continue
        if option.startswith("init") and option[4:].isdigit():
            init_threads = option[4:]
            init_log = tempfile.mkstemp(prefix="kvdiag-bench-init-threads-", suffix=".log")[1]
            env = dict(env, LD_PRELOAD=init_threads_shim(), KVDIAG_INIT_THREADS=init_threads,
                       KVDIAG_INIT_THREADS_LOG=init_log)
            continue
        if option not in OPTIONS:
            sys.exit(f"bench_scan: unknown variant option +{option} (known: {', '.join(OPTIONS)})")
        argv += OPTIONS[option]
    if limit:
        argv += ["--limit", str(limit)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise VariantFailed(f"scan {jobs}@{devices}/{batch or 'default'} gave no JSON (rc {out.returncode}): "
                            f"{out.stderr.strip()[-400:]}") from None
    if init_threads:
        data["bench_init_threads"] = init_threads_answers(init_log, init_threads)
    return data


INIT_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shims", "init_threads.c")
_built_init_shim: list[str] = []


def init_threads_shim() -> str:
    """benchmarks/shims/init_threads.c compiled once per bench run (exit with one line when it cannot be)."""
    if not _built_init_shim:
        shim = os.path.join(tempfile.mkdtemp(prefix="kvdiag-bench-shim-"), "init_threads.so")
        try:
            done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim, INIT_SHIM, "-ldl"],
                                  capture_output=True, text=True, timeout=120)
        except OSError as exc:
            sys.exit(f"bench_scan: the init-threads shim did not build: {exc}")
        if done.returncode != 0:
            sys.exit(f"bench_scan: the init-threads shim did not build: {done.stderr.strip()[:300]}")
        _built_init_shim.append(shim)
    return _built_init_shim[0]


def init_threads_answers(log: str, threads: str) -> dict:
    """What the shim's log says: how many test-backend-ops processes it answered, and where the log is."""
    try:
        with open(log) as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    return {"threads": int(threads), "processes_answered": sum("(the shim's)" in line for line in lines), "log": log}


class VariantFailed(Exception):
    """A variant's scan gave no record: its row says why, and the bench goes on to the next variant (one
    bad variant must not cost the ones after it, which a device session may not get to run again)."""


def summary(name: str, jobs: int, devices: str, data: dict, base: dict | None) -> dict:
    n_dev = len(devices.split(","))
    workers = jobs * n_dev
    verdicts = {p: c["verdict"] for p, c in data["cases"].items()}
    used = sorted({str(c["device"]["index"]) for c in data["cases"].values() if c.get("device")})
    row = {"variant": name, "cases": len(verdicts), "wall_s": data["wall_s"], "sum_case_s": data["sum_case_s"],
           "harness_cpu_s": data.get("harness_cpu_s"),
           "ideal_wall_s": round(data["sum_case_s"] / workers, 2),
           "wall_over_ideal": round(data["wall_s"] / (data["sum_case_s"] / workers), 2),
           "affected": data["counts"]["confirmed"], "devices_used": used,
           "every_case_names_a_requested_device": all(c.get("device") and str(c["device"]["index"]) in devices.split(",")
                                                      for c in data["cases"].values()),
           "per_device": {k: {"cases": v["cases"], "affected": v["affected"]} for k, v in data["devices"].items()},
           "batch_size": data.get("batch_size"), "processes": data.get("processes"),
           "ran_alone_after_batch": data.get("ran_alone_after_batch", 0)}
    row["program"] = (data.get("program") or {}).get("path")
    if data.get("bench_init_threads"):
        row["init_threads"] = data["bench_init_threads"]
    row.update(phase_walls(data))
    if base is not None:
        row["speedup"] = round(base["wall_s"] / data["wall_s"], 2)
        base_verdicts = {p: c["verdict"] for p, c in base["cases"].items()}
        row["verdicts_identical_to_baseline"] = verdicts == base_verdicts
        affected = {p for p, v in verdicts.items() if v == "confirmed"}
        base_affected = {p for p, v in base_verdicts.items() if v == "confirmed"}
        row["affected_identical_to_baseline"] = affected == base_affected
        row["affected_only_in_baseline"] = sorted(base_affected - affected)[:5] + (
            [f"... {len(base_affected - affected) - 5} more"] if len(base_affected - affected) > 5 else [])
        row["affected_only_here"] = sorted(affected - base_affected)[:5] + (
            [f"... {len(affected - base_affected) - 5} more"] if len(affected - base_affected) > 5 else [])
        changed: dict[str, int] = {}
        for p, v in verdicts.items():
            if base_verdicts.get(p) != v:
                key = f"{base_verdicts.get(p)}->{v}"
                changed[key] = changed.get(key, 0) + 1
        row["verdict_changes"] = changed
    return row


def save(folder: str, name: str, data: dict) -> None:
    """One variant's scan JSON, gzipped, named after the variant (its / and , made file-safe)."""
    os.makedirs(folder, exist_ok=True)
    safe = name.replace("/", "b").replace(",", "-").replace(":", "_").replace("@", "at")
    with gzip.open(os.path.join(folder, f"{safe}.json.gz"), "wt") as fh:
        json.dump(data, fh)


def parse_variant(name: str) -> dict:
    """``8@0,1/32:auto+noroute`` → jobs 8, devices 0,1, batch 32, program auto, options (noroute,);
    +OPTIONs may follow JOBS@DEVICES[/BATCH] or PROGRAM."""
    spec, _, tail = name.partition(":")
    spec, *options = spec.split("+")
    program, *more = tail.split("+") if tail else ("",)
    jobs, _, rest = spec.partition("@")
    devices, _, batch = rest.partition("/")
    return {"jobs": jobs, "devices": devices or "0", "batch": batch, "program": program,
            "options": tuple(options + more)}


def phase_walls(data: dict) -> dict:
    """Which path ran (routed or not) and each phase's cases, processes and wall."""
    phases = data.get("phases") or {}
    row = {"path": phases.get("path"), "not_routed_because": phases.get("why"),
           "kernel_filter": phases.get("kernel_filter"), "batch_order": phases.get("batch_order"),
           "overlap": phases.get("overlap")}
    route, detect = phases.get("route") or {}, phases.get("detect") or {}
    if route:
        row.update({"route_cases": route.get("cases"), "route_processes": route.get("processes"),
                    "route_wall_s": route.get("wall_s"), "reached": route.get("reached"),
                    "not_reached": route.get("not_reached"), "unrouted": len(route.get("unrouted") or {}),
                    "launch_changed": phases.get("launch_changed")})
    if detect:
        row.update({"detect_cases": detect.get("cases"), "detect_processes": detect.get("processes"),
                    "detect_wall_s": detect.get("wall_s")})
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--entry", default="D2")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--params", default=None, help="the case space (scan --params), e.g. hsk")
    ap.add_argument("--op", default=None, help="the op (scan --op), for an entry that declares no case space")
    ap.add_argument("--home", default=None, help="KVDIAG_HOME to use (default: a fresh one); a kept one keeps the "
                                                 "launch probe's program for later commands")
    ap.add_argument("--variant", action="append", default=[],
                    help="JOBS@DEVICES[/BATCH][:PROGRAM][+OPTION...], e.g. 8@0, 8@0,1, 8@0/1, 8@0:plain, "
                         "8@0:auto+noroute, 8@0:auto+entry (repeatable)")
    ap.add_argument("--save-dir", default=None, help="write each variant's whole scan JSON there "
                                                     "(VARIANT.json.gz), for fixtures and `kvdiag registry radius`")
    args = ap.parse_args()
    variants = args.variant or ["1@0", "8@0"]
    env = dict(os.environ, KVDIAG_HOME=args.home or tempfile.mkdtemp(prefix="kvdiag-bench-home-"))
    # Untimed warm-up (one case): the sanitizer's control, kvdiag's caches and the launch
    # probe's program are made once, here, not inside whichever variant happens to run first.
    started = time.monotonic()
    try:
        scan(args.build, args.entry, 1, parse_variant(variants[0])["devices"], 1, env, "1", "auto", args.params,
             ("noroute",), op=args.op)
    except VariantFailed as exc:
        sys.exit(f"bench_scan: the warm-up failed: {exc}")
    print(json.dumps({"variant": "warm-up", "warmup_s": round(time.monotonic() - started, 1)}), flush=True)
    base = None
    failed = False
    walls: dict[tuple[str, str, str], float] = {}
    for name in variants:
        v = parse_variant(name)
        jobs, devices, batch = v["jobs"], v["devices"], v["batch"]
        try:
            data = scan(args.build, args.entry, int(jobs), devices, args.limit, env, batch, v["program"], args.params,
                        v["options"], op=args.op)
        except VariantFailed as exc:
            print(json.dumps({"variant": name, "error": str(exc)}), flush=True)
            failed = True
            continue
        row = summary(name, int(jobs), devices, data, base)
        if args.save_dir:
            save(args.save_dir, name, data)
        one_gpu = walls.get((jobs, devices.split(",")[0], batch))
        if "," in devices and one_gpu:
            row["speedup_over_one_gpu"] = round(one_gpu / data["wall_s"], 2)
        walls[(jobs, devices, batch)] = data["wall_s"]
        print(json.dumps(row), flush=True)
        base = base or data
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
