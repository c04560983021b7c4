"""What `kvdiag verify` established about an entry, for its upstream report: the newest verification.

The run store keeps each verification as a ``<ID>-verify`` run (kind ``verify``) whose
run.json holds the whole report (``verify``): the probes, the commit, both arms'
verdicts and k/N, whether BEFORE was a recorded run reused (``--before``) and which,
Fisher's exact test between the two rates, and the conclusion. The section states the
newest finished one as it stands, or that none is recorded. Nothing is re-run.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvdiag.records.rates import Rate
from kvdiag.registry.entry import Entry
from kvdiag.report.formats.markdown import md_code, md_text
from kvdiag.store.runs import RunStore

__all__ = ["latest_verification", "verification_markdown"]


def latest_verification(store: RunStore, entry_id: str) -> tuple[str, Mapping[str, Any]] | None:
    """(run id, the ``verify`` record) of the entry's newest finished verification; None when there is none."""
    found = list(store.finished_records(f"{entry_id}-verify", "verify"))
    return found[-1] if found else None


def verification_markdown(entry: Entry, store: RunStore | None, when: Callable[[str], str] = lambda r: r) -> str:
    """The report's ``## Fix verification`` body. ``when`` turns a run id (or an ISO time) into a date."""
    found = latest_verification(store, entry.id) if store is not None else None
    if found is None:
        return f"No `kvdiag verify` of {entry.id} is recorded in this run store."
    run_id, v = found
    probes = list(v.get("probes") or ())
    flags = " ".join(f"--probe {p}" for p in probes)
    lines = [f"**{md_text(v.get('headline') or v.get('conclusion'))}**: `kvdiag verify {entry.id} {flags}` on "
             f"{md_code(str(v.get('commit') or '?')[:12])}, run {md_code(run_id)} ({when(run_id)}).", ""]
    rates = v.get("rates") if isinstance(v.get("rates"), Mapping) else {}
    for side, what in (("before", "the user's build"), ("after", f"+ {' + '.join(probes)}, a scratch build")):
        arm = v.get(side) or {}
        reused = arm.get("reused")
        if reused:
            started = reused.get("started_at")
            what += (f"; the recorded run {md_code(reused.get('run_id'))}"
                     f"{f' ({when(started)})' if started else ''}, reused, not run again")
        lines.append(f"- {side} ({what}): {arm.get('verdict')}, {_runs(arm, rates.get(side))}")
    if rates:
        verdict = ("the rates differ" if rates.get("differ") else
                   "no difference shown: the runs cannot tell these rates apart")
        lines.append(f"- Fisher's exact test between the two rates: p = {float(rates.get('p_value', 1)):.3g}, "
                     f"{verdict}.")
    lines.append(f"- {md_text(v.get('explanation') or '')}")
    return "\n".join(lines)


def _runs(arm: Mapping[str, Any], rate: Any) -> str:
    if isinstance(rate, Mapping):
        r = Rate(int(rate["k"]), int(rate["n"]))
        return f"{r.text}: the runs rule out {r.excludes}"
    k, n = arm.get("k"), arm.get("n")
    return f"{k}/{n} runs matched the signature" if n is not None else md_text(arm.get("reason") or "")
