"""`kvdiag verify`'s text: the before/after table, the conclusion, what happened to the user's tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvdiag.engine.verify.session import VerifyReport
from kvdiag.report.held_back import held_back_lines, one_line


def render_report(report: VerifyReport) -> str:
    """The before/after table, the conclusion and what happened to the user's tree."""
    from tabulate import tabulate

    b, a = report.before, report.after
    stack = " + ".join(report.probes)
    rows = [
        ("build", _short_path(b.build_dir), _short_path(a.build_dir)),
        ("verdict", b.verdict.value, a.verdict.value),
        *([("runs (k/N)", _k_of_n(b), _k_of_n(a))] if max(b.outcome.n, a.outcome.n) > 1 else []),
        ("sanitizer errors", _dash(b.error_count), _dash(a.error_count)),
        ("sites", ", ".join(b.sites[:3]) or "-", ", ".join(a.sites[:3]) or "-"),
    ]
    labels = list(dict.fromkeys([n.label for n in b.numeric] + [n.label for n in a.numeric]))
    for label in labels:
        nb = next((n for n in b.numeric if n.label == label), None)
        na = next((n for n in a.numeric if n.label == label), None)
        rows.append((label, nb.cell() if nb else "-", na.cell() if na else "-"))
    if not labels:
        rows.append(("numeric", "not run (no numeric step)", "not run (no numeric step)"))
    rows += [
        ("configure", _secs(b.configure_s), _secs(a.configure_s)),
        ("build", _secs(b.build_s), _secs(a.build_s)),
        ("repro run", _secs(b.outcome.duration_s) + (" (recorded)" if b.reused else ""), _secs(a.outcome.duration_s)),
    ]
    for label in labels:
        nb = next((n for n in b.numeric if n.label == label), None)
        na = next((n for n in a.numeric if n.label == label), None)
        rows.append((f"{label} run", _secs(nb.duration_s if nb and nb.ran else None),
                     _secs(na.duration_s if na and na.ran else None)))
    lines = [f"kvdiag verify {report.entry_id}: {stack} on {report.commit[:12]}", ""]
    lines.append(tabulate(rows, headers=["", "before", f"after (+ {stack})"]))
    lines.append("")
    if b.reused is not None:
        r = b.reused
        lines.append(f"before: reused run {r.run_id} (recorded {r.started_at or '?'}, {r.runs} run(s), the same arm: "
                     f"build files, model, repro and signature unchanged); not run again")
    lines.append(f"before: {one_line(b.outcome.reason)}")
    lines.append(f"after:  {one_line(a.outcome.reason)}")
    inconclusive = [o.reason for o in (b.outcome, a.outcome) if o.verdict.value == "inconclusive"]
    lines += held_back_lines(inconclusive)
    lines.append("")
    lines.append(f"conclusion: {report.headline or report.conclusion.value}")
    lines.append(f"  {report.explanation}")
    if report.rates:
        lines.append(f"rates: {report.rates.text}")
        lines.append(f"  before, the runs rule out {report.rates.before.excludes}; after, "
                     f"{report.rates.after.excludes}")
    elif max(b.outcome.n, a.outcome.n) > 1:
        lines.append("rates: not compared: " + ", ".join(
            f"{side.label} had {'one run' if side.outcome.n == 1 else 'no judged run'}"
            for side in (b, a) if side.outcome.rate is None))
    if report.status_unchanged:
        lines.append(f"source tree: untouched (git status --porcelain of {report.source} identical before and after)")
    else:
        lines.append(f"source tree: CHANGED during the run (git status --porcelain of {report.source} differs); "
                     "kvdiag does not write there: check what else ran")
        lines.append("  before: " + (report.status_before.replace("\n", "; ") or "(clean)"))
        lines.append("  after:  " + (report.status_after.replace("\n", "; ") or "(clean)"))
    if report.kept:
        lines.append("kept (--keep): " + ", ".join(str(p) for p in report.kept))
    else:
        lines.append("scratch worktree and build removed")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    lines.append(f"runs: {b.run_dir}  {a.run_dir}")
    return "\n".join(lines) + "\n"


def _k_of_n(side) -> str:
    rate = side.outcome.rate
    return rate.short if rate is not None else side.outcome.k_of_n


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _short_path(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 48 else "…" + text[-47:]
