"""Benchmark: `kvdiag discover` against the raw way, one sanitized process per op, in one run.

The raw way is what a maintainer does by hand (issue #40): `compute-sanitizer --tool T
test-backend-ops test -o OP -b CUDA0` for each op, N at a time, each cut at a cap. It reports
per op its wall, whether the cap cut it, and how many finding blocks it printed. Then
`kvdiag discover` runs the same ops under the same tool, and the benchmark prints both walls,
the ratio (raw / discover), the ops with findings on either side, and what each cut.

    python3 benchmarks/bench_discover.py --build B --tool racecheck --ops CPY,SOFT_MAX,NORM \
        [--raw-jobs 12 --raw-cap 45] [--skip-raw] --out bench.json

The ops default to every op `test-backend-ops --list-ops` prints. Times are wall seconds on
this machine; compare only numbers from one run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--tool", default="racecheck")
    ap.add_argument("--ops", help="comma-separated; default: every op of --list-ops")
    ap.add_argument("--raw-jobs", type=int, default=12)
    ap.add_argument("--raw-cap", type=float, default=45.0)
    ap.add_argument("--skip-raw", action="store_true")
    ap.add_argument("--sanitizer", default="compute-sanitizer")
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
    saved = logs / "discover.json"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvdiag", "discover", "--build", str(args.build), "--tool", args.tool,
                           "--ops", ",".join(ops), "--save", str(saved), "--format", "json"],
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    doc = json.loads(saved.read_text()) if saved.is_file() else {}
    roots = doc.get("roots") or []
    report["discover"] = {"wall_s": round(wall, 2), "exit": done.returncode, "totals": doc.get("totals"),
                          "roots": [{k: r.get(k) for k in ("tool", "kind", "site", "function", "cases", "ops")}
                                    for r in roots],
                          "ops_with_findings": sorted({op for r in roots for op in r.get("ops") or {}}),
                          "stderr_tail": done.stderr[-2000:]}
    if "raw" in report and wall > 0:
        report["ratio_raw_over_discover"] = round(report["raw"]["wall_s"] / wall, 2)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
