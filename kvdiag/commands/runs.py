"""What `kvdiag run`, `scan`, `drift` and `doctor` show: the engine's values, printed, with progress.

The engine returns values and reports progress through a hook; these functions
pick the format, print, and give the engine a `TerminalProgress` (bars on a
terminal, plain lines elsewhere, nothing with --quiet or a JSON format).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import click

from kvdiag.commands.progress import TerminalProgress, progress_display
from kvdiag.engine.scan.session import ScanNotRun
from kvdiag.records.verdict import Outcome
from kvdiag.errors import KvdiagError, UsageError
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry

__all__ = ["ScanNotRun", "doctor_and_show", "drift_and_show", "run_and_show", "scan_and_show"]


def echo(progress: TerminalProgress, text: str, *, nl: bool = True) -> None:
    """Print to stdout without tearing the progress bars on stderr."""
    with progress.printing():
        click.echo(text, nl=nl)


def show_outcome(progress: TerminalProgress, outcome: Outcome, entry: Entry, run_dir: Path, fmt: str) -> None:
    if fmt == "json":
        echo(progress, json.dumps({**outcome.to_dict(), "run_dir": str(run_dir)}, indent=2, default=str))
        return
    from kvdiag.report.run_text import render_outcome

    echo(progress, render_outcome(outcome, entry, run_dir), nl=False)


def run_and_show(entries: Sequence[Entry], build_dir: Path | None, *, step: str | None, runs: int | None,
                 overrides: Mapping[str, Any], sanitizer: Path | None, check_staleness: bool, fmt: str,
                 quiet: bool, step_budget: float | None = None) -> list[Outcome]:
    """`kvdiag run`: each verdict printed as it is decided (``step_budget``: `run --timeout`).

    JSON is one object for one entry and, for several, one array printed once all are decided:
    objects printed one after another would not parse as one document."""
    from kvdiag.engine.run.session import run_verdicts

    as_array = fmt == "json" and len(entries) != 1
    decided: list[dict[str, Any]] = []
    run_dirs: list[Path] = []

    def on_outcome(outcome: Outcome, entry: Entry, run_dir: Path) -> None:
        run_dirs.append(run_dir)
        if as_array:
            decided.append({**outcome.to_dict(), "run_dir": str(run_dir)})
        else:
            show_outcome(progress, outcome, entry, run_dir, fmt)

    from kvdiag.proc.limit import child_time_limit

    with progress_display(quiet or fmt != "text") as progress, child_time_limit(step_budget):
        outcomes = run_verdicts(entries, build_dir, step=step, runs=runs, overrides=overrides, sanitizer=sanitizer,
                                check_staleness=check_staleness, progress=progress, step_budget=step_budget,
                                on_outcome=on_outcome)
        if as_array:
            echo(progress, json.dumps(decided, indent=2, default=str))
    _record_in_history(run_dirs)
    return outcomes


def _record_in_history(run_dirs: Sequence[Path]) -> None:
    """Add the runs' verdicts to the history now, saying so when they cannot be (a damaged
    history.sqlite, a full disk): a run whose verdict missed the history said nothing (issue 43).
    The run store keeps them either way; `kvdiag history` adds them once it can."""
    from kvdiag.store.history import sync_run_store

    if not run_dirs:
        return
    try:
        sync_run_store(only={p.name for p in run_dirs})
    except KvdiagError as exc:
        click.echo(f"kvdiag: warning: the verdict is saved in the run store but not recorded in the history: {exc}",
                   err=True)


def scan_and_show(entry: Entry, build_dir: Path, *, fmt: str, save: Path | None = None, **options: Any):
    """`kvdiag scan`: the table (or JSON) of every case, the scan saved to ``save`` too; the
    ScanResult for the exit code."""
    from kvdiag.engine.scan import session as scan_session
    from kvdiag.fileio import written_as
    from kvdiag.store.scans import save_scan

    with progress_display(fmt != "text") as progress:
        result = scan_session.run_scan(entry, build_dir, progress=progress, **options)
    if save is not None:
        written = save_scan(scan_session.scan_document(result), save)
        click.echo(f"kvdiag: scan saved to {written_as(save, written)}", err=True)
    if fmt == "json":
        click.echo(json.dumps({**scan_session.scan_document(result), "run_dir": str(result.run_dir)}, indent=2,
                              default=str))
    elif fmt in ("markdown", "sarif"):
        from kvdiag.report.scan_formats import render_scan_markdown, render_scan_sarif

        click.echo((render_scan_markdown if fmt == "markdown" else render_scan_sarif)(result, entry))
    else:
        from kvdiag.report.scan_text import render_scan

        click.echo(render_scan(result, result.run_dir), nl=False)
    return result


def drift_and_show(entry: Entry | None, build_dir: Path, *, op: str, params: str, runs: int, fmt: str) -> str:
    """`kvdiag drift`: the per-case table and the verdict; returns the verdict."""
    from kvdiag.engine.drift.session import run_drift_session
    from kvdiag.errors import ScanNotRun

    try:
        re.compile(params)
    except re.error as exc:             # issue 43: '(' was accepted and reported "/(/: 0 case(s)"
        raise UsageError(f"--params {params!r}: not a regular expression ({exc})") from None

    try:
        with progress_display(fmt != "text") as progress:
            session = run_drift_session(entry, build_dir, op=op, params=params, runs=runs, progress=progress)
    except ScanNotRun as exc:          # nothing to measure here (no GPU): the verdict says why
        click.echo(f"{exc.verdict}: {exc}")
        return exc.verdict
    if fmt == "json":
        click.echo(json.dumps({**session.data, "run_dir": str(session.run_dir)}, indent=2, default=str))
    else:
        from kvdiag.report.drift_text import render_drift

        click.echo(render_drift(session.result, session.verdict, session.reason, session.run_dir,
                                seeded_note=session.seeded_note))
    return session.verdict


def doctor_and_show(build_dir: Path | None, *, refresh: bool, fmt: str, sanitizer: Path | None,
                    preface: str | None = None) -> int:
    """`kvdiag doctor` (and `kvdiag run` without a build): the checks and controls, saved and shown;
    its exit code. The tools' controls are counted on the progress display."""
    from kvdiag.controls.doctor import doctor_exit_code, run_doctor
    from kvdiag.home import kvdiag_home
    from kvdiag.report.doctor_text import render_doctor
    from kvdiag.store.runs import RunStore

    home = kvdiag_home()
    run_dir = RunStore(home).create("doctor")
    if preface and fmt == "text":
        click.echo(f"kvdiag: {preface}", err=True)
    with progress_display(fmt != "text") as progress:
        report = run_doctor(home=home, sanitizer=sanitizer, build_dir=build_dir, refresh=refresh,
                            log_dir=run_dir.logs, progress=progress)
    run_dir.write_record(RunRecord(entry="doctor", status="finished", fields={"doctor": report.to_dict()}))
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        click.echo(render_doctor(report), nl=False)
        if preface:
            click.echo("To judge defects, give a build: kvdiag run D2 --build path/to/build (or set $LLAMA_KV_BUILD).")
    return doctor_exit_code(report)
