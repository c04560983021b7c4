"""The upstream-ready report of one entry's run: Markdown to paste into an upstream issue as-is.

It reads a finished run from the run store (`runs/<run-id>/run.json`: `entry`,
`status`, `target`, `outcome`) and the registry entry, and renders
`report.md.j2`: what happens, the exact command, the exact output, the
environment and build it was seen on, what is and is not established, and how
to reproduce it with kvdiag. Nothing is re-run.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping

import click

from kvdiag import __version__
from kvdiag.errors import UsageError
from kvdiag.records.sweep import SweepOutcome
from kvdiag.records.verdict import Outcome
from kvdiag.registry.entry import Entry
from kvdiag.report.formats import entry_view, primary_attempt
from kvdiag.report.bisection import bisection_markdown
from kvdiag.report.verification import verification_markdown
from kvdiag.report.formats.markdown import MARKDOWN_HELPERS, fingerprint_rows, human_time
from kvdiag.report.templating import render
from kvdiag.report.where import where
from kvdiag.store.runs import RunDir, RunStore, id_time
from kvdiag.store.sweeps import target_summary


def find_run(store: RunStore, entry: Entry, run_ref: str | None = "latest") -> RunDir:
    """The run to report: the newest finished run of the entry, or the run named (which must be the entry's)."""
    if run_ref in (None, "latest"):
        skipped: list[str] = []
        run = store.latest_for(entry.id, skipped)
        if run is None:
            raise UsageError(f"no finished run of {entry.id} in {store.root}: run `kvdiag run {entry.id} --build BUILD` "
                             f"first")
        if skipped:
            click.echo(f"kvdiag: reporting {run.run_id}, not the newer unfinished run(s) of {entry.id}: "
                       f"{', '.join(skipped)}", err=True)
        return run
    run = store.find(run_ref)
    data = _read(run)
    if str(data.get("entry", "")).upper() != entry.id.upper():
        raise UsageError(f"run {run.run_id} is a run of {data.get('entry')!r}, not of {entry.id}")
    if data.get("status") != "finished" or not isinstance(data.get("outcome"), Mapping):
        raise UsageError(f"run {run.run_id} did not finish (status {data.get('status')!r}): nothing to report")
    return run


def _read(run: RunDir) -> dict[str, Any]:
    return run.read_checked()


def reproduce_command(entry: Entry, run: Mapping[str, Any]) -> str:
    """The kvdiag command line that re-runs this: same step, same overrides, the reader's build."""
    argv = ["kvdiag", "run", entry.id, "--build", "BUILD"]
    step = run.get("step") or (run.get("outcome") or {}).get("step")
    if step and entry.steps and step != entry.default_step.name:
        argv += ["--step", str(step)]
    for key, value in sorted((run.get("overrides") or {}).items()):
        argv += ["--set", f"{key}={value}"]
    return shlex.join(argv).replace("BUILD", "path/to/build")


def exact_command(outcome: Outcome) -> str | None:
    """The first attempt's first command, shell-quoted, exactly as it ran (else the first command of any attempt)."""
    for attempt in outcome.attempts:
        commands = attempt.commands
        if commands and commands[0].get("argv"):
            return shlex.join(str(a) for a in commands[0]["argv"])
    return None


def build_equivalent(command: str | None, run: Mapping[str, Any]) -> str | None:
    """The command with the build's own test-backend-ops in place of kvdiag's launch-probe build of it
    (``$KVDIAG_HOME/probe-programs/…``), which a reader of the report does not have; None when the
    command ran the build's own program."""
    if not command:
        return None
    argv = shlex.split(command)
    at = next((i for i, arg in enumerate(argv) if "/probe-programs/" in arg), None)
    if at is None:
        return None
    name = Path(argv[at]).name
    own = (((run.get("target") or {}).get("build") or {}).get("binaries") or {}).get(name)
    return shlex.join([*argv[:at], own or f"bin/{name}", *argv[at + 1:]])


def upstream_report(entry: Entry, run: RunDir | Mapping[str, Any], *, run_id: str | None = None,
                    store: RunStore | None = None) -> str:
    """Render the report of one finished run (a RunDir, or its run.json as a mapping). ``store`` (default:
    the run's own) is where the entry's bisections are looked up."""
    if isinstance(run, RunDir):
        run_id = run_id or run.run_id
        data = _read(run)
        store = store or RunStore(run.path.parent.parent)
    else:
        data = dict(run)
    raw = data.get("outcome")
    if not isinstance(raw, Mapping):
        raise UsageError(f"run {run_id or '?'} has no outcome: nothing to report")
    try:
        outcome = SweepOutcome.of(Outcome.from_dict({"entry": entry.id, **raw}), title=entry.title)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"run {run_id or '?'} has an outcome kvdiag cannot read ({exc}): nothing to report") from None
    view = entry_view(outcome)
    t = target_summary(data.get("target"))
    build_rows, env_rows = fingerprint_rows(t)
    attempt = primary_attempt(outcome)
    references = [{"type": r.get("type") or "WEB", "url": r["url"], "note": r.get("note")}
                  for r in entry.references if r.get("url")]
    location = where(entry, data.get("target"), raw.get("extra"))
    return render(
        "report.md.j2", entry=entry, o=outcome, v=view, t=t, build_rows=build_rows, env_rows=env_rows,
        command=exact_command(outcome), own_command=build_equivalent(exact_command(outcome), data),
        reproduce=reproduce_command(entry, data), run_id=run_id,
        when=human_time(_date(run_id)) if run_id else None, attempt_index=attempt.index if attempt else None,
        established=entry.section("Established"), not_established=entry.section("Not established"),
        location=location, references=references, aliases=list(entry.aliases),
        run_version=data.get("kvdiag_version") or __version__, kvdiag_version=__version__,
        overrides=dict(data.get("overrides") or {}), bisection=_bisection(entry, store),
        verification=verification_markdown(entry, store, when=lambda ref: human_time(_date(ref))),
        radius=radius_sentences(entry), **MARKDOWN_HELPERS,
    )


def _bisection(entry: Entry, store: RunStore | None) -> str:
    return bisection_markdown(entry, store, when=lambda run_id: human_time(_date(run_id)))


def radius_sentences(entry: Entry) -> list[str]:
    """One sentence per measured radius (`kvdiag registry radius`): where, when, how many cases, which kernels."""
    out = []
    for r in entry.radius:
        named = list(r.get("kernels") or r.get("instantiations") or ())
        where = f"{r.get('tree') or r.get('repo')} at {str(r.get('commit'))[:12]}"
        out.append(f"Measured blast radius ({where}, {r.get('measured')}, kvdiag {r.get('kvdiag')}): "
                   f"{r.get('affected_cases', '?')} of {r.get('cases', '?')} {r.get('op')} cases /{r.get('scanned')}/ "
                   f"are affected, in {len(named)} kernel instantiation(s): {', '.join(named)}.")
    return out


def _date(run_id: str) -> str:
    """`20261129-100000-D2-ab12` -> ISO time (the run store names runs by their UTC start)."""
    return id_time(run_id) or run_id
