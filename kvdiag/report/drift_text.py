"""`kvdiag drift`'s text: per case runs, fails, error values and the margin to the threshold."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from kvdiag.engine.drift.measure import DriftResult


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
