"""Running an entry against a target: its stages called in order, each once.

plan (engine.verdict.plan: the step, its comparison arm, the run's record, whether it runs at
all) → each attempt (engine.verdict.attempt: argv planned, processes run, their output observed
and judged) → the verdict (engine.verdict.outcome: aggregated, the case, the comparison, the site,
the range) → the record finished.

The run directory is written before anything starts and finished atomically at
the end; every command's output streams into its logs as it arrives, so a run
that is killed, interrupted or crashes still leaves what happened on disk.
"""

from __future__ import annotations

import time
from dataclasses import replace

from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.attempt import attempt_step
from kvdiag.engine.verdict.outcome import conclude, failed_outcome, finish, interrupted_outcome
from kvdiag.engine.verdict.plan import plan_run
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.target import Target
from kvdiag.errors import AttemptInterrupted, KvdiagError, RunInterrupted
from kvdiag.records.verdict import Attempt, Outcome
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir


def run_entry(entry: Entry, target: Target, run_dir: RunDir, *, options: RunOptions,
              gate_provider: GateProvider) -> Outcome:
    """One verdict for one entry; raises RunInterrupted (after recording) on Ctrl-C. The entry's case
    regexes are first put in the form this build's test-backend-ops prints (engine.verdict.plan)."""
    started = time.monotonic()
    plan = plan_run(entry, target, run_dir, options, gate_provider, started)
    if plan.outcome is not None:       # not run: not applicable, not required here, or a build skipped
        return finish(run_dir, plan.header, plan.outcome)
    if plan.arm is not None:
        options = replace(options, comparison=plan.arm.read)
    attempts: list[Attempt] = []
    try:
        for index in range(1, plan.runs + 1):
            label = f"{plan.entry.id} [{plan.step.name}] run {index}/{plan.runs}"
            attempt = attempt_step(plan.entry, plan.step, target, run_dir, index, label, options, gate_provider)
            if options.cancelled or (plan.arm is not None and plan.arm.interrupted):
                raise AttemptInterrupted(attempt)  # another thread stopped this run, or Ctrl-C in the comparison arm
            attempts.append(attempt)
    except AttemptInterrupted as exc:
        outcome = finish(run_dir, plan.header, interrupted_outcome(plan, [*attempts, exc.attempt], started))
        raise RunInterrupted(outcome) from None
    except KvdiagError:
        raise
    except Exception as exc:  # kvdiag's own failure: an `error` verdict, recorded, never a lost run
        return finish(run_dir, plan.header, failed_outcome(plan, attempts, run_dir, exc, started))
    outcome, interrupted = conclude(plan, target, run_dir, attempts, options, gate_provider, started)
    finish(run_dir, plan.header, outcome)
    if interrupted:
        raise RunInterrupted(outcome)
    return outcome
