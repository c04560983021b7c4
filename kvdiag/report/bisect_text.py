"""`kvdiag bisect`'s text: the ends and steps with their times, the commit found with its evidence and its parent's."""

from __future__ import annotations

from kvdiag.records.bisect import BisectRecord, CommitEvidence, StepRecord
from kvdiag.text import clip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def step_rows(report: BisectRecord) -> list[tuple]:
    """One row per commit judged: role, commit, verdict, git's term, configure/build/run/total seconds, reason.
    A step taken from an earlier bisection (--resume) says so in its role; its seconds are that run's."""
    term = report.direction.term_of
    return [(f"{s.role} (taken)" if s.reused_from else s.role, s.commit[:12], s.verdict, term(s.exit), _seconds(s.configure_s), _seconds(s.build_s),
             _seconds(s.run_s), _seconds(s.duration_s), clip(s.reason, 80)) for s in report.steps]


STEP_HEADERS = ["role", "commit", "verdict", "git", "configure s", "build s", "run s", "total s", "reason"]


def render_bisect(report: BisectRecord) -> str:
    from tabulate import tabulate

    d = report.direction
    along = ", first parents only" if report.first_parent else ""
    lines = [f"kvdiag bisect {report.entry_id} ({d.value}: {d.found_means}{along}): old {report.old[:12]}, "
             f"new {report.new[:12]}", ""]
    if report.steps:
        lines.append(tabulate(step_rows(report), headers=STEP_HEADERS))
        lines.append("")
    if report.found is not None:
        found = report.found
        lines.append(f"{d.found_label}: {found.commit[:12]} {found.subject}")
        lines.append(f"  at it:        {_evidence_text(found)}")
        if report.parent is not None:
            p = report.parent
            lines.append(f"  at its parent {p.commit[:12]} {p.subject}: {_evidence_text(p)}")
    else:
        lines.append(report.message)
        for sha in report.candidates:
            lines.append(f"  {sha}")
    skipped = report.skipped()
    if skipped:
        lines.append(f"skipped (never blamed): {', '.join(_skip_text(s) for s in skipped)}")
    here = [s for s in report.steps if not s.reused_from]
    taken = [s for s in report.steps if s.reused_from]
    lines.append(f"{len(here)} commit(s) judged in {sum(s.duration_s for s in here):.1f} s"
                 + (f"; compiler launcher {report.launcher}" if report.launcher else ""))
    for run_id in dict.fromkeys(s.reused_from for s in taken):
        from_run = [s for s in taken if s.reused_from == run_id]
        lines.append(f"{len(from_run)} commit(s) taken from run {run_id}, judged there in "
                     f"{sum(s.duration_s for s in from_run):.1f} s: "
                     + ", ".join(f"{s.commit[:12]} ({s.verdict})" for s in from_run))
    if report.status_unchanged:
        lines.append("source tree: untouched (git status --porcelain identical before and after)")
    else:
        lines.append("source tree: CHANGED during the bisection (git status --porcelain differs)")
    lines.append(f"run: {report.run_dir}")
    return "\n".join(lines) + "\n"


def _skip_text(step: StepRecord) -> str:
    return f"{step.commit[:12]} ({step.verdict})"


def _evidence_text(evidence: CommitEvidence) -> str:
    return f"{evidence.verdict}: {evidence.reason}" if evidence.verdict else evidence.reason
