"""One `kvdiag drift` invocation: run, tabulate, save."""

from __future__ import annotations

import json
from pathlib import Path

import click
from tabulate import tabulate

from kvdiag.engine.drift import DriftResult, judge_drift, run_drift
from kvdiag.errors import UsageError
from kvdiag.home import kvdiag_home
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore
from kvdiag.target.build import inspect_build, probe_backend_ops


def run_drift_session(entry: Entry | None, build_dir: Path, *, op: str, params: str, runs: int, fmt: str) -> str:
    if not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    run_dir = RunStore(kvdiag_home()).create(f"drift-{entry.id if entry else op}")
    build = inspect_build(build_dir, log_dir=run_dir.logs, check_staleness=False)
    binary = build.binary("test-backend-ops")
    if binary is None:
        raise UsageError(f"no test-backend-ops in {build_dir}")
    info = probe_backend_ops(binary, log_dir=run_dir.logs)
    criterion = entry.drift if entry else None
    seeds = tuple((criterion or {}).get("seeds", ()))
    result = run_drift(binary, run_dir, op=op, params=params, runs=runs, seeds=seeds, has_seed=info.has_seed)
    verdict, reason = judge_drift(result, criterion)
    data = {"entry": entry.id if entry else None, "verdict": verdict, "reason": reason, "build": build.to_dict(),
            "drift": result.to_dict()}
    run_dir.write("run.json", {**data, "status": "finished", "kind": "drift"})
    if fmt == "json":
        click.echo(json.dumps({**data, "run_dir": str(run_dir.path)}, indent=2, default=str))
    else:
        click.echo(render_drift(result, verdict, reason, run_dir.path, seeded_note=_seed_note(info, seeds)))
    return verdict


def _seed_note(info, seeds) -> str:
    if info.has_seed:
        return f"this test-backend-ops takes --seed: {len(seeds) or 'no'} seed(s) given"
    return "this test-backend-ops has no --seed: every run draws new random inputs"


def render_drift(result: DriftResult, verdict: str, reason: str, run_dir: Path, seeded_note: str) -> str:
    rows = []
    for c in sorted(result.cases.values(), key=lambda c: (-(c.fails), c.margin if c.margin is not None else 9, c.case)):
        d = c.to_dict()
        fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        rows.append((d["runs"], d["fails"], fmt(d["min"]), fmt(d["median"]), fmt(d["max"]), fmt(d["threshold"]),
                     "-" if d["margin"] is None else f"{d['margin'] * 100:.1f}%", c.case))
    printed = sum(1 for c in result.cases.values() if c.errors)
    lines = [f"drift of {result.op} /{result.params}/: {result.matched} case(s), {result.runs} run(s); {seeded_note}",
             tabulate(rows, headers=["runs", "fails", "min err", "median", "max", "threshold", "margin", "case"]),
             f"{verdict}: {reason}"]
    if printed < result.matched:
        lines.append(f"note: {result.matched - printed} case(s) printed no error value (test-backend-ops prints it "
                     "only on failure; apply the probe print-every-case-error to see every margin)")
    lines.append(f"run: {run_dir}")
    return "\n".join(lines)
