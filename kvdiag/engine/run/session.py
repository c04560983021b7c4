"""One `kvdiag run` invocation: prepare the target once, run each entry, hand each outcome back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kvdiag.engine.run.attribution import attribute_outcome
from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.errors import RunInterrupted
from kvdiag.engine.verdict.ranges import look_up_commits
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.records.verdict import Outcome
from kvdiag.home import kvdiag_home
from kvdiag.progress import Progress
from kvdiag.records.run import target_record
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore
from kvdiag.workspace.build import check_build_dir

#: called with each outcome as it is decided, its entry and its run folder (the command prints it)
OnOutcome = Callable[[Outcome, Entry, Path], None]


def run_verdicts(entries: Sequence[Entry], build_dir: Path | None, *, step: str | None, runs: int | None,
                 overrides: Mapping[str, Any], sanitizer: Path | None, check_staleness: bool,
                 on_outcome: OnOutcome | None = None, progress: Progress | None = None,
                 step_budget: float | None = None) -> list[Outcome]:
    progress = progress or Progress()
    if build_dir is not None:
        check_build_dir(build_dir)           # a run that cannot start leaves no run folder
    home = kvdiag_home()
    store = RunStore(home)
    setup = store.create("target")
    progress.say(f"inspecting {build_dir or 'no build'}, GPU and tools")
    target = prepare_target(build_dir, log_dir=setup.logs, sanitizer=sanitizer, check_staleness=check_staleness,
                            home=home)
    setup.write_record(target_record(target.to_dict()))
    look_up_commits(target.history, entries)
    gate_provider = controls_gate_provider(home, target, setup.logs)
    outcomes: list[Outcome] = []
    if len(entries) > 1:
        progress.begin("entries", len(entries))
    for entry in entries:
        run_dir = store.create(entry.id)
        options = RunOptions(step=step, runs=runs, overrides=overrides, progress=progress, step_budget=step_budget,
                             attribute=attribute_outcome)
        try:
            outcome = run_entry(entry, target, run_dir, options=options, gate_provider=gate_provider)
        except RunInterrupted as exc:
            outcomes.append(exc.outcome)
            if on_outcome is not None:
                on_outcome(exc.outcome, entry, run_dir.path)
            break
        outcomes.append(outcome)
        progress.advance(f"{entry.id} {outcome.verdict.value}")
        if on_outcome is not None:
            on_outcome(outcome, entry, run_dir.path)
    progress.end()
    return outcomes
