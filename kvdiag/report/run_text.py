"""One verdict of `kvdiag run` as text: the verdict, its reason, the evidence and the command to rerun it."""

from __future__ import annotations

from pathlib import Path

from kvdiag.records.verdict import Outcome
from kvdiag.registry.entry import Entry
from kvdiag.report.formats import first_command
from kvdiag.report.templating import render


def render_outcome(outcome: Outcome, entry: Entry, run_dir: Path) -> str:
    return render("verdict.txt.j2", o=outcome, title=entry.title, run_dir=run_dir, command=first_command(outcome))
