"""What bisection established about an entry, for its upstream report: from this run store, then the registry.

Two sources, each said for what it is:

* the run store's bisections of the entry (``<ID>-bisect`` runs, kind ``bisect``):
  the newest finished one of each direction, with the commit it found (or why it
  found none), its range, run id, date and source tree;
* the registry: the entry's ``[[affected]]`` commits (``introduced`` other than
  "0", ``fixed``, ``last_affected``) per repository, and the text of its
  ``## Bisection`` section, which says how those were established.

With no run and no commit in the registry, the report says bisection has not been run. Nothing is re-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdiag.records.bisect import BisectRecord, Direction
from kvdiag.registry.entry import Entry
from kvdiag.report.formats.markdown import md_code, md_text
from kvdiag.store.runs import RunStore

__all__ = ["BisectionFinding", "bisection_markdown", "latest_bisections", "registry_commits"]


@dataclass(frozen=True)
class BisectionFinding:
    """One recorded bisection, as the report states it."""

    record: BisectRecord
    run_id: str

    @property
    def flag(self) -> str:
        return "--fix" if self.record.direction is Direction.FIX else "--cause"

    def to_view(self) -> dict[str, Any]:
        r = self.record
        found = r.found
        return {"label": r.direction.found_label, "direction": r.direction.value, "flag": self.flag,
                "commit": found.commit[:12] if found else None, "subject": found.subject if found else None,
                "message": r.message, "candidates": [c[:12] for c in r.candidates],
                "range": f"{r.old[:12]}..{r.new[:12]}", "judged": len(r.steps), "run_id": self.run_id,
                "tree": r.repository or r.source, "ends_verified": r.ends_verified,
                "taken": sorted({s.reused_from for s in r.steps if s.reused_from}),
                "taken_count": sum(1 for s in r.steps if s.reused_from)}


def latest_bisections(store: RunStore, entry_id: str) -> list[BisectionFinding]:
    """The newest finished bisection of the entry in each direction (cause first), from run.json's ``bisect``."""
    latest: dict[Direction, BisectionFinding] = {}
    for run_id, raw in store.finished_records(f"{entry_id}-bisect", "bisect"):
        try:
            record = BisectRecord.from_dict(raw)
        except (TypeError, ValueError):
            continue
        latest[record.direction] = BisectionFinding(record, run_id)
    return [latest[d] for d in (Direction.CAUSE, Direction.FIX) if d in latest]


def registry_commits(entry: Entry) -> list[dict[str, str]]:
    """Per ``[[affected]]`` range, the commits it names (an ``introduced`` of "0" names none) and its note."""
    rows = []
    for affected in entry.affected:
        named = [(key, str(affected[key])) for key in ("introduced", "fixed", "last_affected")
                 if affected.get(key) and str(affected[key]) != "0"]
        if named:
            rows.append({"repo": str(affected.get("repo", "")), "commits": named, "note": affected.get("note")})
    return rows


def bisection_markdown(entry: Entry, store: RunStore | None, when=lambda run_id: run_id) -> str:
    """The report's ``## Bisection`` body: one line per recorded bisection and per registry range, a sentence
    when the store has none (saying bisection has not been run when the registry names no commit either),
    then the entry's own ## Bisection text. ``when`` turns a run id into its date."""
    runs = latest_bisections(store, entry.id) if store is not None else []
    registry = registry_commits(entry)
    lines = [f"- {_run_line(f, when(f.run_id))}" for f in runs]
    for r in registry:
        commits = ", ".join(f"{key.replace('_', ' ')} {md_code(commit[:12])}" for key, commit in r["commits"])
        note = f" ({md_text(r['note'])})" if r["note"] else ""
        lines.append(f"- In the registry, for {r['repo']}: {commits}{note}.")
    if not runs:
        if lines:
            lines.append("")
        tail = "" if registry else (", and the registry names no commit that introduced or fixed it: bisection "
                                    "has not been run")
        lines.append(f"No `kvdiag bisect` of {entry.id} is recorded in this run store{tail}.")
    text = entry.section("Bisection")
    if text:
        lines += ["", text]
    return "\n".join(lines)


def _run_line(finding: BisectionFinding, when: str) -> str:
    v = finding.to_view()
    if v["commit"]:
        head = f"**{v['label']} {md_code(v['commit'])}** ({md_text(v['subject'])}): "
    else:
        named = ", ".join(md_code(c) for c in v["candidates"])
        head = (f"**{v['direction']} bisection, no commit named**: {md_text(v['message'])}"
                + (f" ({named})" if named else "") + "; ")
    judged = f"{v['judged']} commit{'' if v['judged'] == 1 else 's'} judged"
    if v["taken"]:
        judged += f", {v['taken_count']} of them taken from run{'s' if len(v['taken']) > 1 else ''} " + ", ".join(
            md_code(run_id) for run_id in v["taken"])
    ends = "both ends as required" if v["ends_verified"] else "the ends NOT as required"
    tree = f", tree {md_code(v['tree'])}" if v["tree"] else ""
    return (f"{head}established by `kvdiag bisect {v['flag']}` over {md_code(v['range'])} ({judged}, {ends}), "
            f"run {md_code(v['run_id'])} ({when}){tree}.")
