"""`kvdiag bisect`'s text: the steps git took, the first bad commit with its evidence and its parent's."""

from __future__ import annotations

from kvdiag.engine.bisect import SKIP, BisectReport, CommitEvidence
from kvdiag.text import clip


def render_bisect(report: BisectReport) -> str:
    from tabulate import tabulate

    lines = [f"kvdiag bisect {report.entry_id}: good {report.good[:12]}, bad {report.bad[:12]}", ""]
    rows = [(s.get("commit", "")[:12], s.get("verdict"), s.get("exit"), clip(str(s.get("reason", "")), 90))
            for s in report.steps]
    if rows:
        lines.append(tabulate(rows, headers=["commit", "verdict", "git", "reason"]))
        lines.append("")
    if report.first_bad is not None:
        fb = report.first_bad
        lines.append(f"first bad commit: {fb.commit[:12]} {fb.subject}")
        lines.append(f"  at it:        {_evidence_text(fb)}")
        if report.parent is not None:
            p = report.parent
            lines.append(f"  at its parent {p.commit[:12]} {p.subject}: {_evidence_text(p)}")
    else:
        lines.append(report.message)
        for sha in report.candidates:
            lines.append(f"  {sha}")
    skipped = [s for s in report.steps if s.get("exit") == SKIP]
    if skipped:
        lines.append(f"skipped (not blamed): {', '.join(str(s.get('commit', ''))[:12] for s in skipped)}")
    if report.status_unchanged:
        lines.append("source tree: untouched (git status --porcelain identical before and after)")
    else:
        lines.append("source tree: CHANGED during the bisection (git status --porcelain differs)")
    lines.append(f"run: {report.run_dir}")
    return "\n".join(lines) + "\n"


def _evidence_text(evidence: CommitEvidence) -> str:
    return f"{evidence.verdict}: {evidence.reason}" if evidence.verdict else evidence.reason
