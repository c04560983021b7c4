"""What changed between two sweeps (A = before, e.g. the last release; B = after).

Per entry, one change, the first that applies:

- ``regression``: confirmed in B, not confirmed in A (a newly confirmed defect);
- ``fixed``: confirmed in A, not-reproduced in B;
- ``applicability``: not-applicable on one side only (the build gained or lost the feature);
- ``changed``: any other verdict change (e.g. inconclusive → not-reproduced: not a fix,
  the earlier run proved nothing);
- ``unchanged``: same verdict;
- ``only-in-a`` / ``only-in-b``: the entry is in one sweep only (added to or removed
  from the registry, or outside one sweep's selection). An entry only in B is never a
  regression: nothing says it was absent from A's build.

Notes beside the change say what moved within it: the sanitizer's error count,
k/N of a flaky entry, and applicability when it changed along with a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdiag.records.sweep import SweepOutcome
from kvdiag.report.formats import error_count
from kvdiag.store.sweeps import Sweep, entry_sort_key, target_summary

CHANGES = ("regression", "fixed", "applicability", "changed", "unchanged", "only-in-a", "only-in-b")


@dataclass(frozen=True)
class EntryChange:
    entry: str
    title: str
    change: str
    before: str | None
    after: str | None
    k_n_before: str | None
    k_n_after: str | None
    errors_before: int | None
    errors_after: int | None
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "title": self.title, "change": self.change, "before": self.before,
                "after": self.after, "k_n_before": self.k_n_before, "k_n_after": self.k_n_after,
                "errors_before": self.errors_before, "errors_after": self.errors_after, "notes": list(self.notes)}


@dataclass(frozen=True)
class Comparison:
    before: Sweep
    after: Sweep
    entries: tuple[EntryChange, ...]

    def by_change(self, change: str) -> list[EntryChange]:
        return [e for e in self.entries if e.change == change]

    @property
    def regressions(self) -> list[EntryChange]:
        return self.by_change("regression")

    def counts(self) -> dict[str, int]:
        return {c: len(self.by_change(c)) for c in CHANGES}

    def to_dict(self) -> dict[str, Any]:
        return {"before": _describe(self.before), "after": _describe(self.after), "counts": self.counts(),
                "entries": [e.to_dict() for e in self.entries]}


def _describe(sweep: Sweep) -> dict[str, Any]:
    t = target_summary(sweep.target)
    return {"started_at": sweep.started_at, "commit": t.commit, "dirty": t.dirty, "gpu": t.gpu_name, "cc": t.cc,
            "driver": t.driver, "sanitizer": t.sanitizer_version, "machine_key": t.machine_key,
            "kvdiag_version": sweep.kvdiag_version, "shard": sweep.shard, "entries": len(sweep.outcomes)}


def _classify(a: SweepOutcome, b: SweepOutcome) -> tuple[str, list[str]]:
    before, after = a.verdict.value, b.verdict.value
    notes: list[str] = []
    applicability = (before == "not-applicable") != (after == "not-applicable")
    if before != "confirmed" and after == "confirmed":
        change = "regression"
        if applicability:
            notes.append("applicability changed: not-applicable before")
    elif before == "confirmed" and after == "not-reproduced":
        change = "fixed"
    elif applicability:
        change = "applicability"
    elif before != after:
        change = "changed"
    else:
        change = "unchanged"
    ea, eb = error_count(a), error_count(b)
    if ea != eb and (ea is not None or eb is not None):
        notes.append(f"sanitizer errors {ea if ea is not None else '-'} → {eb if eb is not None else '-'}")
    ka, kb = a.k_of_n, b.k_of_n
    if before == after and ka != kb and "-" not in (ka, kb):  # a verdict change already says it
        notes.append(f"k/N {ka} → {kb}")
    return change, notes


def compare_sweeps(before: Sweep, after: Sweep) -> Comparison:
    a = {o.entry_id: o for o in before.outcomes}
    b = {o.entry_id: o for o in after.outcomes}
    rows: list[EntryChange] = []
    for entry in sorted(set(a) | set(b), key=entry_sort_key):
        oa, ob = a.get(entry), b.get(entry)
        title = (ob or oa).title
        if oa is None or ob is None:
            change, notes = ("only-in-b" if oa is None else "only-in-a"), []
        else:
            change, notes = _classify(oa, ob)
        rows.append(EntryChange(
            entry=entry, title=title, change=change,
            before=oa.verdict.value if oa else None, after=ob.verdict.value if ob else None,
            k_n_before=oa.k_of_n if oa else None, k_n_after=ob.k_of_n if ob else None,
            errors_before=error_count(oa) if oa else None, errors_after=error_count(ob) if ob else None,
            notes=tuple(notes)))
    return Comparison(before, after, tuple(rows))


def render_comparison(comparison: Comparison, *, all_entries: bool = True) -> str:
    """A terminal table; with all_entries False, unchanged entries without notes are left out."""
    from tabulate import tabulate

    a, b = _describe(comparison.before), _describe(comparison.after)
    lines = [
        f"A: {a['started_at']}  commit {(a['commit'] or '?')[:12]}{' (dirty)' if a['dirty'] else ''}  "
        f"{a['gpu'] or 'no GPU'}  driver {a['driver'] or '?'}  sanitizer {a['sanitizer'] or '?'}",
        f"B: {b['started_at']}  commit {(b['commit'] or '?')[:12]}{' (dirty)' if b['dirty'] else ''}  "
        f"{b['gpu'] or 'no GPU'}  driver {b['driver'] or '?'}  sanitizer {b['sanitizer'] or '?'}",
    ]
    if a["machine_key"] and b["machine_key"] and a["machine_key"] != b["machine_key"]:
        lines.append("note: the sweeps ran on different machines or toolkits (machine keys differ)")
    shown = [e for e in comparison.entries if all_entries or e.change != "unchanged" or e.notes]
    rows = [(e.entry, e.change.upper() if e.change == "regression" else e.change, e.before or "-", e.after or "-",
             f"{e.k_n_before or '-'} → {e.k_n_after or '-'}", "; ".join(e.notes)) for e in shown]
    lines += ["", tabulate(rows, headers=["id", "change", "A", "B", "k/N", "notes"], disable_numparse=True)
              if rows else "(no entries)", ""]
    counts = comparison.counts()
    lines.append(", ".join(f"{n} {c}" for c, n in counts.items() if n) or "nothing to compare")
    return "\n".join(lines) + "\n"
