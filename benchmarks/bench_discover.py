"""Benchmark: `kvdiag discover` against the raw way, one sanitized process per op, in one run.

The raw way is what a maintainer does by hand (issue #40): `compute-sanitizer --tool T
test-backend-ops test -o OP -b CUDA0` for each op, N at a time, each cut at a cap. It reports
per op its wall, whether the cap cut it, and how many finding blocks it printed. Then
`kvdiag discover` runs the same ops under the same tool, and the benchmark prints both walls,
the ratio (raw / discover), the ops with findings on either side, and what each cut.

    python3 benchmarks/bench_discover.py --build B --tool racecheck --ops CPY,SOFT_MAX,NORM \
        [--raw-jobs 12 --raw-cap 45] [--skip-raw] [--programs plain,auto,auto:no-route] --out bench.json

``--programs plain,auto`` runs discover once per program, one after the other (`--program` of
`kvdiag discover`: the build's own test mode against the launch probe's GPU-only mode), and
compares them (``compare``): per op whose every case both judged, the processes' summed walls and
their ratio, and whether every case judged by both came out in the same state with the same
findings (racecheck's hazard counts, which vary run to run, left out). ``auto:no-route`` is the
launch probe's program with `--no-route` (every case sanitized under racecheck); against ``auto``
(racecheck only where a launch holds shared memory) a case one arm spared agrees with the other
arm's clean judgement, and ``spared_with_findings`` counts the cases one arm spared and the other
found something in: routing is sound only if it is 0. ``:backtrace-no`` adds `--backtrace no`
(no tool's records with device frames), ``:backtrace-device`` `--backtrace device` (every tool's);
the default (auto) leaves synccheck's without. ``:racecheck-workers-N`` adds `--racecheck-workers N`
(racecheck's host threads per process) and ``:jobs-N`` `-j N`. Suffixes combine
(``auto:no-route:backtrace-no``). With three arms or more, ``compare_all`` compares each later arm
with the first. Each arm also reports ``cpu_s``: the user and system seconds its processes spent on
the host (the sanitizer's and the program's, every one waited for).

The ops default to every op `test-backend-ops --list-ops` prints. Times are wall seconds on
this machine; compare only numbers from one run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ARM_FLAGS = {"no-route": ("--no-route",), "backtrace-no": ("--backtrace", "no"),
             "backtrace-device": ("--backtrace", "device")}
FINDING = re.compile(r"={9} (?:Error|Warning|Invalid|Barrier error|Uninitialized|Race reported)")


def list_ops(binary: Path) -> list[str]:
    out = subprocess.run([str(binary), "--list-ops"], capture_output=True, text=True, timeout=120).stdout
    return [line.strip() for line in out.splitlines() if re.fullmatch(r"\s+[A-Z0-9_]+\s*", line)]


def raw_op(sanitizer: str, binary: Path, tool: str, op: str, cap: float, logs: Path) -> dict:
    started = time.monotonic()
    log = logs / f"raw-{tool}-{op}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sanitizer, "--tool", tool, str(binary), "test", "-o", op, "-b", "CUDA0"],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=cap)
            cut = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            cut = True
    text = log.read_text(errors="replace")
    return {"op": op, "wall_s": round(time.monotonic() - started, 2), "cut": cut, "returncode": proc.returncode,
            "findings": len(FINDING.findall(text))}


COUNTED_FLAGS = {"racecheck-workers": "--racecheck-workers", "jobs": "-j"}
_COUNTED = re.compile(r"(?P<name>[a-z-]+)-(?P<n>[0-9]+)")


def arm_flags(program: str) -> tuple[str, list[str]]:
    """``program`` (``NAME[:SUFFIX...]``) as discover's --program value and the flags its suffixes add."""
    name, *suffixes = program.split(":")
    flags: list[str] = []
    for suffix in suffixes:
        counted = _COUNTED.fullmatch(suffix)
        if suffix in ARM_FLAGS:
            flags += ARM_FLAGS[suffix]
        elif counted and counted["name"] in COUNTED_FLAGS:
            flags += [COUNTED_FLAGS[counted["name"]], counted["n"]]
        else:
            known = [*ARM_FLAGS, *(f"{k}-N" for k in COUNTED_FLAGS)]
            raise SystemExit(f"--programs {program}: unknown suffix {suffix!r} (known: {', '.join(known)})")
    return name, flags


def children_cpu_s() -> float:
    """User and system seconds of every child process waited for so far (their own children included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_discover(build: Path, tool: str, ops: list[str], program: str, logs: Path,
                 params: str | None = None) -> tuple[dict, dict]:
    """One `kvdiag discover` over ``ops`` (``program``: a --program value, then suffixes such as
    ``:no-route`` or ``:racecheck-workers-1``): its row for the report, and its saved document."""
    name, flags = arm_flags(program)
    saved = logs / f"discover-{program.replace(':', '-')}.json"
    cpu_before = children_cpu_s()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvdiag", "discover", "--build", str(build), "--tool", tool,
                           "--ops", ",".join(ops), "--program", name, "--save", str(saved), "--format", "json",
                           *flags, *(["--params", params] if params else [])],
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu_s = children_cpu_s() - cpu_before
    doc = json.loads(saved.read_text()) if saved.is_file() else {}
    roots = doc.get("roots") or []
    return {"wall_s": round(wall, 2), "discover_wall_s": doc.get("wall_s"), "cpu_s": round(cpu_s, 1),
            "exit": done.returncode,
            "program": doc.get("program"), "routing": doc.get("routing"), "totals": doc.get("totals"),
            "roots": [{k: r.get(k) for k in ("tool", "kind", "site", "function", "cases", "ops")} for r in roots],
            "ops_with_findings": sorted({op for r in roots for op in r.get("ops") or {}}),
            "stderr_tail": done.stderr[-2000:]}, doc


def compare_arms(first: dict, second: dict, names: tuple[str, str] = ("first", "second")) -> dict:
    """Two saved discoveries of the same cases: per op that both finished, the processes' summed walls and
    second/first; over the cases both judged, how many agree in state and findings."""
    def judged(doc: dict) -> dict:
        return {(c["tool"], c["op"], c["params"]): c for c in doc.get("cases") or () if c["state"] != "cut"}

    def seconds(doc: dict) -> dict:
        out: dict[str, float] = {}
        for row in doc.get("processes") or ():
            out[row["op"]] = out.get(row["op"], 0.0) + float(row.get("wall_s") or 0.0)
        return out

    def what(case: dict) -> tuple:
        state = "clean" if case["state"] == "spared" else case["state"]      # spared: nothing the tool could see
        return state, sorted((f.get("kind"), f.get("file"), f.get("line"), f.get("function"), f.get("kernel"),
                              f.get("peer")) for f in case.get("findings") or ())

    def spared_found(x: dict, y: dict) -> int:
        return sum(1 for k in both if x[k]["state"] == "spared" and y[k].get("findings"))

    a, b = judged(first), judged(second)
    both = set(a) & set(b)
    listed = (first.get("space") or {}).get("ops") or {}
    per_tool = max(1, len(first.get("tools") or ()))
    whole = [op for op, n in listed.items()
             if sum(1 for k in a if k[1] == op) == sum(1 for k in b if k[1] == op) == n * per_tool]
    sa, sb = seconds(first), seconds(second)
    return {"arms": list(names), "cases_judged_by_both": len(both),
            "agree": sum(1 for k in both if what(a[k]) == what(b[k])),
            "spared": {names[0]: sum(1 for k in both if a[k]["state"] == "spared"),
                       names[1]: sum(1 for k in both if b[k]["state"] == "spared")},
            "spared_with_findings": spared_found(a, b) + spared_found(b, a),
            "ops_both_finished": {op: {names[0]: round(sa.get(op, 0.0), 1), names[1]: round(sb.get(op, 0.0), 1),
                                       "ratio": round(sb.get(op, 0.0) / sa[op], 3) if sa.get(op) else None}
                                  for op in sorted(whole)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--tool", default="racecheck")
    ap.add_argument("--ops", help="comma-separated; default: every op of --list-ops")
    ap.add_argument("--params", help="discover's --params (the raw way runs every case of its ops)")
    ap.add_argument("--raw-jobs", type=int, default=12)
    ap.add_argument("--raw-cap", type=float, default=45.0)
    ap.add_argument("--skip-raw", action="store_true")
    ap.add_argument("--sanitizer", default="compute-sanitizer")
    ap.add_argument("--programs", default="auto", help="comma-separated `kvdiag discover --program` values")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    binary = args.build / "bin" / "test-backend-ops"
    ops = args.ops.split(",") if args.ops else list_ops(binary)
    logs = Path(tempfile.mkdtemp(prefix="kvdiag-bench-discover-"))
    report: dict = {"tool": args.tool, "ops": ops, "logs": str(logs)}
    if not args.skip_raw:
        started = time.monotonic()
        with ThreadPoolExecutor(args.raw_jobs) as pool:
            rows = list(pool.map(lambda op: raw_op(args.sanitizer, binary, args.tool, op, args.raw_cap, logs), ops))
        report["raw"] = {"wall_s": round(time.monotonic() - started, 2), "jobs": args.raw_jobs, "cap_s": args.raw_cap,
                         "cut": [r["op"] for r in rows if r["cut"]],
                         "ops_with_findings": [r["op"] for r in rows if r["findings"]], "per_op": rows}
    docs: dict[str, dict] = {}
    for program in args.programs.split(","):
        arm, docs[program] = run_discover(args.build, args.tool, ops, program, logs, args.params)
        report.setdefault("discover", arm)                 # the first arm, as before --programs
        report.setdefault("programs", {})[program] = arm
    wall = report["discover"]["wall_s"]
    if "raw" in report and wall > 0:
        report["ratio_raw_over_discover"] = round(report["raw"]["wall_s"] / wall, 2)
    arms = list(docs)
    if len(arms) >= 2:
        report["compare"] = compare_arms(docs[arms[0]], docs[arms[1]], names=(arms[0], arms[1]))
    if len(arms) >= 3:
        report["compare_all"] = [compare_arms(docs[arms[0]], docs[arm], names=(arms[0], arm)) for arm in arms[1:]]
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
