"""The verdict stage: from a run's attempts to its outcome, and the outcome recorded in run.json.

The attempts' verdicts are aggregated (kvdiag.records.verdict.aggregate); a walk that died
without naming its case gets the case the attribution hook finds (kvdiag.engine.run.attribution,
handed in through RunOptions); the comparison arm's lines are quoted; the site the detector
printed is checked against the registry's (engine.verdict.site_check) and what the entry's
affected range says is added (engine.verdict.presence). A run cut short by Ctrl-C, and one
in which kvdiag itself failed, still end in an outcome here, recorded like any other.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Mapping, Sequence

from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.plan import RunPlan
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.presence import after_running, built_without
from kvdiag.engine.verdict.site_check import site_notes
from kvdiag.engine.verdict.target import Target
from kvdiag.errors import AttemptInterrupted
from kvdiag.fileio import write_atomic
from kvdiag.proc.signals import interruption
from kvdiag.records.run import RunRecord, log_truncation
from kvdiag.records.verdict import Attempt, Outcome, Verdict, aggregate
from kvdiag.registry.entry import matchers_for
from kvdiag.store.runs import RunDir


def conclude(plan: RunPlan, target: Target, run_dir: RunDir, attempts: list[Attempt], options: RunOptions,
             gate_provider: GateProvider, started: float) -> tuple[Outcome, bool]:
    """The run's outcome, and whether it was interrupted meanwhile (by Ctrl-C during the attribution
    or the comparison arm, or by the caller's cancel event): it is recorded as such."""
    entry, step, arm = plan.entry, plan.step, plan.arm
    verdict, reason = aggregate(attempts)
    extra, interrupted = _attribute(plan, target, run_dir, attempts, verdict, options, gate_provider)
    interrupted = interrupted or options.cancelled
    if extra.get("case"):
        reason += f"; {describe_case(extra['case'])}"
    if not interrupted and arm is not None:
        comparison = arm.summary(verdict)
        if comparison is not None:
            extra = {**extra, "comparison": comparison}
            if not _measured_in_reason(plan, verdict):
                reason += f"; {describe_comparison(comparison)}"
        interrupted = arm.interrupted or options.cancelled
    cut = _cut(attempts)
    notes, site = site_notes(entry, target, attempts, verdict, scan_case=options.scan_case)
    verdict, reason, warnings = after_running(verdict, reason, [*plan.warnings, *notes], plan.presence,
                                              built_without=built_without(attempts))
    extra = {**extra, **({"site": site} if site else {}), **({"interrupted": True} if interrupted else {})}
    outcome = Outcome(entry.id, verdict, reason, tuple(attempts), tuple(dict.fromkeys(warnings + cut)), step.name,
                      time.monotonic() - started, extra, range=plan.presence)
    return outcome, interrupted


def interrupted_outcome(plan: RunPlan, attempts: Sequence[Attempt], started: float) -> Outcome:
    """The outcome of a run Ctrl-C cut short: inconclusive, unless a run that finished had confirmed
    the defect (that stays true when a later run is cut short)."""
    verdict, reason = Verdict.INCONCLUSIVE, f"interrupted by the user ({interruption()}); partial logs kept"
    if any(a.verdict is Verdict.CONFIRMED for a in attempts):
        verdict, reason = aggregate([a for a in attempts if a.verdict is Verdict.CONFIRMED])
        reason += f" (interrupted during run {len(attempts)} of {plan.runs})"
    return Outcome(plan.entry.id, verdict, reason, tuple(attempts), plan.warnings, plan.step.name,
                   time.monotonic() - started, {"interrupted": True}, range=plan.presence)


def failed_outcome(plan: RunPlan, attempts: Sequence[Attempt], run_dir: RunDir, exc: Exception,
                   started: float) -> Outcome:
    """kvdiag's own failure while the step ran: an `error` verdict, its traceback kept beside the logs
    (called while ``exc`` is being handled)."""
    write_atomic(run_dir.path / "error.txt", traceback.format_exc())
    return Outcome(plan.entry.id, Verdict.ERROR, f"kvdiag failed while running the step: {type(exc).__name__}: "
                   f"{exc} (traceback in {run_dir.path / 'error.txt'})", tuple(attempts), plan.warnings,
                   plan.step.name, time.monotonic() - started, range=plan.presence)


def finish(run_dir: RunDir, header: RunRecord, outcome: Outcome) -> Outcome:
    """The run's record, finished with its outcome (interrupted when the outcome or a command says so)."""
    interrupted = outcome.extra.get("interrupted") or any(
        command.get("interrupted") for attempt in outcome.attempts for command in attempt.commands)
    run_dir.write_record(header.with_status("interrupted" if interrupted else "finished", outcome=outcome))
    return outcome


def describe_case(found: Mapping[str, Any]) -> str:
    """One line for the verdict's reason: the case, or why none was found, and what the search cost."""
    cost = f"{len(found.get('tried') or ())} process(es), {found.get('wall_s') or 0:.1f} s on top of the run"
    if found.get("case"):
        return f"case: {found['case']} (reproduced alone; {cost})"
    return f"case not found: {found.get('why_not')} ({cost})"


def describe_comparison(found: Mapping[str, Any]) -> str:
    """One line for the verdict's reason: the comparison arm's quoted lines, or what it did not print."""
    text = f"comparison arm {found['step']}: "
    if found.get("seen"):
        text += "; ".join(found["seen"])
    if found.get("missing"):
        text += ("; " if found.get("seen") else "") + f"{', '.join(found['missing'])} not seen ({found.get('exit')})"
    return text


def _attribute(plan: RunPlan, target: Target, run_dir: RunDir, attempts: list[Attempt], verdict: Verdict,
               options: RunOptions, gate_provider: GateProvider) -> tuple[dict, bool]:
    """The options' attribution hook, if any; a Ctrl-C during it keeps the verdict and is recorded."""
    if options.attribute is None:
        return {}, False
    try:
        return options.attribute(plan.entry, plan.step, target, run_dir, attempts, verdict, options,
                                 gate_provider), False
    except AttemptInterrupted:
        return {"case": {"case": None, "why_not": "interrupted while re-running cases alone", "tried": []}}, True


def _measured_in_reason(plan: RunPlan, verdict: Verdict) -> bool:
    """Whether the reason already quotes the comparison arm's line: a relative matcher's text is
    in every confirmed and not-reproduced reason of its step (engine.verdict.judge)."""
    step = plan.step
    relative = any(m.type == "relative" and m.arm == step.compare_with for m in matchers_for(plan.entry, step.name))
    return relative and verdict in (Verdict.CONFIRMED, Verdict.NOT_REPRODUCED)


def _cut(attempts: list[Attempt]) -> list[str]:
    """The warning a run gets when a refused write cut its logs (the verdict may not rest on them)."""
    cut = log_truncation(attempts)
    if cut is None:
        return []
    return [f"{cut['bytes_lost']} bytes of output never reached the logs ({cut['error']}): what the verdict "
            "read was cut short (log_truncated in run.json)"]
