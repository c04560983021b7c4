"""One `kvdiag run` invocation: prepare the target once, run each entry, print each verdict."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

import click

from kvdiag.engine.attribution import attribute_outcome
from kvdiag.engine.execute import RunInterrupted, RunOptions, run_entry
from kvdiag.engine.gates import controls_gate_provider
from kvdiag.engine.progress import Progress
from kvdiag.engine.target import prepare_target
from kvdiag.engine.verdict import Outcome
from kvdiag.home import kvdiag_home
from kvdiag.registry.entry import Entry
from kvdiag.report.templating import render
from kvdiag.store.runs import RunStore


def run_verdicts(entries: Sequence[Entry], build_dir: Path | None, *, step: str | None, runs: int | None,
                 overrides: Mapping[str, Any], sanitizer: Path | None, check_staleness: bool, fmt: str,
                 quiet: bool) -> list[Outcome]:
    home = kvdiag_home()
    store = RunStore(home)
    progress = Progress(enabled=not quiet and fmt == "text")
    setup = store.create("target")
    progress.say(f"inspecting {build_dir or 'no build'}, GPU and tools")
    target = prepare_target(build_dir, log_dir=setup.logs, sanitizer=sanitizer, check_staleness=check_staleness,
                            home=home)
    setup.write("run.json", {"entry": "target", "status": "finished", "target": target.to_dict()})
    gate_provider = controls_gate_provider(home, target, setup.logs)
    outcomes: list[Outcome] = []
    for entry in entries:
        run_dir = store.create(entry.id)
        options = RunOptions(step=step, runs=runs, overrides=overrides, progress=progress,
                             attribute=attribute_outcome)
        try:
            outcome = run_entry(entry, target, run_dir, options=options, gate_provider=gate_provider)
        except RunInterrupted as exc:
            _print(exc.outcome, entry, run_dir.path, fmt)
            outcomes.append(exc.outcome)
            break
        _print(outcome, entry, run_dir.path, fmt)
        outcomes.append(outcome)
    return outcomes


def first_command(outcome: Outcome) -> str | None:
    for attempt in outcome.attempts:
        for command in attempt.commands:
            return shlex.join(command["argv"])
    return None


def _print(outcome: Outcome, entry: Entry, run_dir: Path, fmt: str) -> None:
    if fmt == "json":
        data = outcome.to_dict()
        data["run_dir"] = str(run_dir)
        click.echo(json.dumps(data, indent=2, default=str))
        return
    click.echo(render("verdict.txt.j2", o=outcome, title=entry.title, run_dir=run_dir,
                      command=first_command(outcome)), nl=False)
