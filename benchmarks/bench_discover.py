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

Two suffixes change the arm's surroundings, not discover's flags: ``:cores-N`` holds discover and
everything it starts to the first N cores this process may use (what ``taskset`` does; half the
cores answer whether the host binds, docs/performance.md), and ``:blocking-sync`` preloads
``benchmarks/shims/cuda_blocking_sync.c`` (built once with ``cc``), so that every test-backend-ops
process waits for the GPU asleep instead of spinning; the arm reports how many processes set that
schedule (``blocking_sync``). Every arm starts from the same kvdiag home: a fresh folder linking the
home's entries but its ``runs`` (the probe's program and the controls are shared), because discover
orders its queue by the costs of the home's newest discoveries, and an arm must not learn from the
one before it.

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
SETTINGS = ("cores", "blocking-sync")        # suffixes that set the arm's surroundings, not discover's flags
SHIM = Path(__file__).resolve().parent / "shims" / "cuda_blocking_sync.c"
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
        elif suffix == "blocking-sync" or (counted and counted["name"] == "cores" and int(counted["n"]) > 0):
            continue                                 # arm_settings reads these
        else:
            known = [*ARM_FLAGS, *(f"{k}-N" for k in COUNTED_FLAGS), "cores-N", "blocking-sync"]
            raise SystemExit(f"--programs {program}: unknown suffix {suffix!r} (known: {', '.join(known)})")
    return name, flags


def arm_settings(program: str) -> tuple[int | None, bool]:
    """``program``'s surroundings: (the cores to hold it to, None for all; whether to preload the shim)."""
    cores, blocking = None, False
    for suffix in program.split(":")[1:]:
        counted = _COUNTED.fullmatch(suffix)
        if counted and counted["name"] == "cores":
            cores = int(counted["n"])
        blocking = blocking or suffix == "blocking-sync"
    return cores, blocking


def first_cores(n: int) -> set[int]:
    """The first ``n`` cores this process may run on (all of them when it may run on fewer)."""
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[:n])


def arm_home(base: Path, into: Path) -> Path:
    """A fresh kvdiag home at ``into`` linking every entry of ``base`` but ``runs``."""
    into.mkdir(mode=0o700, parents=True)
    if base.is_dir():
        for entry in base.iterdir():
            if entry.name != "runs":
                (into / entry.name).symlink_to(entry.resolve())
    return into


def build_shim(logs: Path) -> Path:
    """The blocking-sync shim, compiled into ``logs`` (one line and exit 2 when it cannot be)."""
    shim = logs / "cuda_blocking_sync.so"
    if not shim.exists():
        done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM), "-ldl"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"bench_discover: the blocking-sync shim did not build: {done.stderr.strip()[:300]}")
    return shim


def children_cpu_s() -> float:
    """User and system seconds of every child process waited for so far (their own children included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_discover(build: Path, tool: str, ops: list[str], program: str, logs: Path,
                 params: str | None = None, home: Path | None = None) -> tuple[dict, dict]:
    """One `kvdiag discover` over ``ops`` (``program``: a --program value, then suffixes such as
    ``:no-route``, ``:racecheck-workers-1`` or ``:cores-8``): its row for the report, and its saved
    document. ``home``: the kvdiag home whose entries but its runs the arm's own fresh home links."""
    name, flags = arm_flags(program)
    cores, blocking = arm_settings(program)
    label = program.replace(":", "-")
    saved = logs / f"discover-{label}.json"
    env = {**os.environ, "KVDIAG_HOME": str(arm_home(home, logs / f"home-{label}"))} if home is not None \
        else dict(os.environ)
    blocking_log = logs / f"blocking-sync-{label}.log"
    if blocking:
        env.update(LD_PRELOAD=str(build_shim(logs)), KVDIAG_BLOCKING_SYNC_LOG=str(blocking_log))
    held = first_cores(cores) if cores else None
    cpu_before = children_cpu_s()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvdiag", "discover", "--build", str(build), "--tool", tool,
                           "--ops", ",".join(ops), "--program", name, "--save", str(saved), "--format", "json",
                           *flags, *(["--params", params] if params else [])],
                          capture_output=True, text=True, env=env,
                          preexec_fn=(lambda: os.sched_setaffinity(0, held)) if held else None)
    wall = time.monotonic() - started
    cpu_s = children_cpu_s() - cpu_before
    doc = json.loads(saved.read_text()) if saved.is_file() else {}
    roots = doc.get("roots") or []
    set_by = blocking_log.read_text().split("\n") if blocking and blocking_log.exists() else []
    return {"wall_s": round(wall, 2), "discover_wall_s": doc.get("wall_s"), "cpu_s": round(cpu_s, 1),
            "cores": len(held) if held else None,
            "blocking_sync": {"processes_set": sum(1 for line in set_by if "blocking-sync" in line
                                                   and line.endswith("status=0")),
                              "notes": sorted({line.split(" ", 1)[1] for line in set_by
                                               if line and "status=0" not in line})[:5]} if blocking else None,
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
    from kvdiag.home import kvdiag_home

    home = kvdiag_home()                              # the home discover would use; each arm links it anew
    docs: dict[str, dict] = {}
    for program in args.programs.split(","):
        arm, docs[program] = run_discover(args.build, args.tool, ops, program, logs, args.params, home=home)
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
