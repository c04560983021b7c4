"""The plan stage: what a run of an entry will run, decided before anything runs.

First the entry meets the build. An entry describes each case once; where it meets a build
(`run`, `scan`, `drift`, a sweep's runs, a radius scan), every case regex it holds is
rewritten in the form the build's test-backend-ops prints (kvdiag.parse.case_format): the
steps' ``params``, the ``case`` matchers' ``params``, the ``[scan]`` space and dimensions, the
measured radii and the ``[drift]`` case. Rewriting the entry once, where it meets the target,
is what makes run, scan, radius and drift select the same cases on every tree: none of them
keeps a regex of its own that could be left unmapped (`adapt_entry`).

Then `plan_run` settles the rest of a run: the step asked for, its comparison arm
(engine.verdict.comparison, run only when read), the run's record written before anything
starts, and whether the step runs at all: not applicable, or not required here
(engine.verdict.applicability, weighed against the affected range by engine.verdict.presence),
or a compile step under ``--skip-builds``. Each attempt's own plan (its argv) is
engine.verdict.planning's.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Mapping

from kvdiag import __version__
from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.applicability import judge_applicability
from kvdiag.engine.verdict.arm import arm_record
from kvdiag.engine.verdict.comparison import ComparisonArm, comparison_arm
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.presence import before_running
from kvdiag.engine.verdict.processes import compiles
from kvdiag.engine.verdict.target import Target
from kvdiag.errors import UsageError
from kvdiag.parse.case_format import CaseFormat
from kvdiag.records.ranges import RangeEvidence
from kvdiag.records.run import RunRecord
from kvdiag.records.verdict import Outcome, Verdict
from kvdiag.registry.entry import Entry, Step, matchers_for
from kvdiag.store.runs import RunDir

__all__ = ["RunPlan", "adapt_entry", "case_format_of", "format_note", "pick_step", "plan_run"]


@dataclass(frozen=True)
class RunPlan:
    """A run of an entry as planned before anything runs."""

    entry: Entry                      # its case regexes in the build's form
    step: Step
    runs: int
    header: RunRecord                 # run.json as written when the run started
    presence: RangeEvidence           # what the entry's affected ranges say about the tree
    warnings: tuple[str, ...]
    arm: ComparisonArm | None         # the step's comparison arm, run the first time it is read
    outcome: Outcome | None = None    # the verdict without running: not applicable, not required, skipped


def plan_run(entry: Entry, target: Target, run_dir: RunDir, options: RunOptions, gate_provider: GateProvider,
             started: float) -> RunPlan:
    """The plan of one run of ``entry`` on ``target``; its record is written
    here, before anything runs, so that a run that fails later still leaves its folder."""
    written, step = entry, pick_step(entry, options.step)
    entry = adapt_entry(entry, case_format_of(target))
    step = entry.step(step.name)
    note = format_note(written, entry, target)
    arm = comparison_arm(entry, step, target, run_dir, options, gate_provider)
    runs = options.runs or step.runs
    header = RunRecord(entry=entry.id, status="running", fields={
        "kvdiag_version": __version__, "step": step.name, "target": target.to_dict(),
        "overrides": dict(options.overrides), **options.record,
        "arm": arm_record(entry, step, target, runs=runs, overrides=options.overrides)})
    run_dir.write_record(header)
    presence = target.range_evidence(entry)
    judgement = judge_applicability(entry, step, target.facts())
    warnings = [*judgement.warnings, *judgement.notes, *presence.notes, *note]
    if target.build is not None and target.build.staleness.stale:
        warnings.append(f"the build is stale against its sources ({target.build.staleness.pending_count} "
                        f"step(s) pending, {target.build.staleness.tool}): results may not reflect the source")
    verdict, reason = None, ""
    if judgement.verdict is not None:          # not applicable or not required here, weighed against the range
        verdict, reason = before_running(judgement, presence)
    elif options.skip_builds and compiles(step):
        verdict, reason = Verdict.SKIPPED, f"its step {step.name!r} compiles code: build checks skipped (--skip-builds)"
    outcome = None if verdict is None else Outcome(entry.id, verdict, reason, (), tuple(warnings), step.name,
                                                   time.monotonic() - started, range=presence)
    return RunPlan(entry, step, runs, header, presence, tuple(warnings), arm, outcome)


def pick_step(entry: Entry, name: str | None) -> Step:
    """The step ``name`` asks for (the entry's default without one); only a step with a signature gives a verdict."""
    if name is None:
        return entry.default_step
    step = entry.step(name)
    if step is None:
        raise UsageError(f"{entry.id} has no step {name!r} (steps: {', '.join(s.name for s in entry.steps)})")
    if not matchers_for(entry, step.name):
        judged = next((s.name for s in entry.steps if s.compare_with == step.name), None)
        if judged is not None:
            raise UsageError(f"{entry.id} step {name!r} has no signature: it is the comparison arm of step "
                             f"{judged!r} and runs with it (kvdiag run {entry.id} --step {judged})")
        raise UsageError(f"{entry.id} step {name!r} has no signature: it is informational, not a verdict")
    return step


def case_format_of(target) -> CaseFormat:
    """The case format of the target's test-backend-ops (unknown without one)."""
    info = getattr(target, "backend_ops", None)
    return info.case_format if info is not None else CaseFormat(None, "no test-backend-ops in the build")


def adapt_entry(entry: Entry, fmt: CaseFormat) -> Entry:
    """The entry with every case regex in ``fmt``'s form; the entry itself when nothing changes."""
    if not fmt.known:
        return entry
    steps = tuple(_step(s, fmt) for s in entry.steps)
    signature = tuple(dataclasses.replace(m, params=fmt.adapt(m.params), fields=_with(m.fields, "params", fmt))
                      if m.type == "case" and m.params else m for m in entry.signature)
    scan = entry.scan
    if scan:
        scan = dataclasses.replace(scan, params=fmt.adapt(scan.params), dimensions=fmt.adapt_dimensions(scan.dimensions),
                                   table={**scan.table, "params": fmt.adapt(scan.params)})
    drift = entry.drift
    if drift:
        drift = dataclasses.replace(drift, params=fmt.adapt(drift.params), table=_with(drift.table, "params", fmt))
    radius = tuple({**t, **{k: fmt.adapt_all(t[k]) for k in ("params", "scanned") if t.get(k)}}
                   for t in entry.radius)
    adapted = dataclasses.replace(entry, steps=steps, signature=signature, scan=scan, drift=drift, radius=radius)
    return adapted if adapted != entry else entry


def format_note(entry: Entry, adapted: Entry, target) -> list[str]:
    """The verdict's note when the entry's case regexes were rewritten for the target's build (none otherwise)."""
    return [case_format_of(target).describe()] if adapted is not entry else []


def _step(step: Step, fmt: CaseFormat) -> Step:
    params = step.vars.get("params")
    if not isinstance(params, str):
        return step
    return dataclasses.replace(step, vars={**step.vars, "params": fmt.adapt(params)})


def _with(table: Mapping[str, Any], key: str, fmt: CaseFormat) -> dict[str, Any]:
    table = dict(table)
    if isinstance(table.get(key), str):
        table[key] = fmt.adapt(table[key])
    return table
