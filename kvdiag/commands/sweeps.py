"""CLI commands for sweeps, their reports and the verdict history: sweep, merge, compare, history, report.

Each command takes the CLI `Context` (`.registry`) through `click.pass_obj`,
raises library errors and returns its exit code; `kvdiag.cli.main` turns both
into the process's exit status.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from kvdiag.commands.options import Count, GivenPath, IdList, Seconds, build_option
from kvdiag.engine.verdict.processes import BUDGET_FACTOR, BUDGET_FLOOR_S
from kvdiag.errors import DataError, UsageError
from kvdiag.fileio import output_target, write_atomic, written_as
from kvdiag.exitcodes import ExitCode
from kvdiag.proc.slots import check_slots_setting
from kvdiag.report.formats import SweepFormat, clip
from kvdiag.shards import resolve_shard
from kvdiag.store.sweeps import Sweep, load_sweep, save_sweep


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    written = write_atomic(output, text)
    click.echo(f"kvdiag: wrote {written_as(output, written)}", err=True)


def _write_formatted(sweep: Sweep, fmt: str, output: Path | None, quiet: bool) -> None:
    _emit(SweepFormat(fmt).to_formatter().format(sweep), output)
    if output is not None and fmt != SweepFormat.TABLE.value and not quiet:
        click.echo(SweepFormat.TABLE.to_formatter().format(sweep), nl=False)


FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(SweepFormat.names()), default="table",
                             show_default=True, help="Output format (JUnit XML, SARIF 2.1.0, HTML page, ...).")


@click.command("sweep")
@build_option()
@click.option("--only", multiple=True, type=IdList("D2,D10"), metavar="IDS", help="Only these entries (comma-separated; repeatable).")
@click.option("--exclude", multiple=True, type=IdList("D2,D10"), metavar="IDS", help="Leave these entries out (comma-separated; repeatable).")
@click.option("--shard", metavar="I/N|auto",
              help="Run shard I of N (from 1): the selection in id order (D2 before D10), dealt round-robin. "
                   "auto: I and N from a Slurm job array, a Kubernetes Indexed Job or GitLab parallel: "
                   "(docs/fleets.md).")
@FORMAT_OPTION
@click.option("-o", "--output", type=GivenPath(path_type=Path, dir_okay=False),
              help="Write the formatted sweep here (the summary table still goes to the terminal).")
@click.option("--save", type=GivenPath(path_type=Path, dir_okay=False),
              help="Also save the sweep JSON here (it is always saved under the run store).")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--no-staleness", is_flag=True, help="Skip the build-tool dry run (D13's check).")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--devices", type=IdList("0,1"), metavar="I,J", help="GPUs to use (default: every visible one), as kvdiag lists them.")
@click.option("--step-budget", type=Seconds(86400, least=1), metavar="SECONDS",
              help="Seconds any step may run before its process tree is ended and the entry is inconclusive "
                   f"(default: {BUDGET_FACTOR}x the step's expected_seconds, at least {BUDGET_FLOOR_S:g}, "
                   "at most its timeout).")
@click.option("--skip-builds", is_flag=True,
              help="Skip the steps that compile code (D7's configure and build): a sweep of the build's own "
                   "binaries only. Default: build checks run.")
@click.pass_obj
def sweep_cmd(ctx, build_dir, only, exclude, shard, fmt, output, save, sanitizer, no_staleness, quiet,
              devices, step_budget, skip_builds) -> int:
    """Run every selected entry against one build; save, record and format the sweep.

    The target is inspected once. GPU entries run one after another on each GPU
    (one worker per visible GPU, each result naming its device); CPU-only
    entries run beside them. Every step has a time budget (--step-budget): past
    it the step's processes are ended and its entry is inconclusive, partial log
    kept. The sweep is saved as JSON under the run store (and to --save) after
    every entry, and recorded in the history ($KVDIAG_HOME/history.sqlite).

    Exit code: 1 if any entry is confirmed, else 70 if kvdiag failed on any,
    else 4 if any is inconclusive, else 0 if any is not-reproduced; when none
    was judged, 3 if any was skipped, else 2 (130 when interrupted).
    """
    from kvdiag.commands.progress import progress_display
    from kvdiag.engine.sweep.session import run_sweep, select_entries, sweep_exit_code

    if build_dir is None:
        raise UsageError("a sweep needs a build: --build BUILD or $LLAMA_KV_BUILD")
    if not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    chosen = resolve_shard(shard, os.environ)
    check_slots_setting()
    for path in (output, save):
        if path is not None:
            output_target(path)          # refuse a FIFO or device before the sweep runs, not after
    if not ctx.registry.entries:
        raise DataError("the registry has no usable entries (see `kvdiag registry lint`)")
    selection = select_entries(ctx.registry.entries, only, exclude)
    if not selection:
        raise UsageError("the selection is empty: nothing to sweep")
    with progress_display(quiet) as progress:
        progress.say(f"build checks: {'skipped (--skip-builds)' if skip_builds else 'on (--skip-builds skips them)'}"
                     f"; step budget: {f'{step_budget:g} s' if step_budget else 'from each step'}")
        result = run_sweep(selection, build_dir, shard=chosen and chosen.text,
                           shard_from=chosen and chosen.origin(), sanitizer=sanitizer,
                           check_staleness=not no_staleness, save=save, devices=devices, progress=progress,
                           step_budget=step_budget, skip_builds=skip_builds)
    _write_formatted(result.sweep, fmt, output, quiet)
    if not quiet:
        also = f" and to {written_as(save, output_target(save))}" if save is not None else ""
        click.echo(f"kvdiag: sweep saved to {result.path}{also}", err=True)
    return sweep_exit_code(result.sweep)


@click.command("merge")
@click.argument("shards", nargs=-1, required=True, type=GivenPath(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=GivenPath(path_type=Path, dir_okay=False), required=True,
              help="Where to save the merged sweep or scan JSON.")
@FORMAT_OPTION
@click.option("--no-record", is_flag=True, help="Do not record the merged sweep in the history.")
@click.pass_obj
def merge_cmd(ctx, shards, output, fmt, no_record) -> int:
    """Merge the sweep (or scan) files of shards 1..N into the one an unsharded run gives.

    Refuses shards of different targets, selections or shard counts, a missing
    (named) or repeated shard, and an entry or case in two shards. Prints the
    merged sweep (--format) and exits as `kvdiag sweep` would have for the whole
    selection; merged scans print as `kvdiag scan` does (table, or json) and
    exit as it would.
    """
    from kvdiag.engine.sweep.session import sweep_exit_code
    from kvdiag.fileio import read_json
    from kvdiag.store.history import record_sweep
    from kvdiag.store.discoveries import is_discovery
    from kvdiag.store.scans import is_scan
    from kvdiag.store.sweeps import merge_sweeps, with_sources

    for shard in shards:
        if output.exists() and shard.exists() and os.path.samefile(output, shard):
            raise UsageError(f"-o {output} is one of the shards being merged: give another file")
    documents = [read_json(p, "sweep or scan") for p in shards]
    for path, document in zip(shards, documents):
        if not isinstance(document, dict):
            raise DataError(f"{path}: not a kvdiag sweep or scan (the JSON is not an object)")
    found = [is_discovery(d) for d in documents]
    if any(found):
        if not all(found):
            raise UsageError("merge takes the shards of one discovery, not discoveries with sweeps or scans: "
                             + ", ".join(str(p) for p, f in zip(shards, found) if not f) + " are not discoveries")
        return _merge_discoveries(ctx, shards, documents, output, fmt)
    scans = [is_scan(d) for d in documents]
    if any(scans):
        if not all(scans):
            raise UsageError("merge takes the shards of one sweep or of one scan, not both: "
                             + ", ".join(str(p) for p, scan in zip(shards, scans) if not scan) + " are not scans")
        return _merge_scans(shards, documents, output, fmt)
    merged = with_sources(merge_sweeps([Sweep.from_dict(d, source=str(p)) for p, d in zip(shards, documents)]))
    written = save_sweep(merged, output)
    if not no_record:
        record_sweep(merged, path=output)
    click.echo(f"kvdiag: merged {len(shards)} shard(s), {len(merged.outcomes)} entries, "
               f"into {written_as(output, written)}", err=True)
    click.echo(SweepFormat(fmt).to_formatter().format(merged), nl=False)
    return sweep_exit_code(merged)


def _merge_discoveries(ctx, paths, documents, output: Path, fmt: str) -> int:
    """Shards of one `kvdiag discover`: the whole discovery, its roots rebuilt and matched against the registry."""
    from kvdiag.engine.discover.result import from_document
    from kvdiag.report.discover_formats import exit_code, render
    from kvdiag.store.discoveries import check_discovery, merge_discoveries, save_discovery

    if fmt not in ("table", "json", "markdown", "sarif", "html"):
        raise UsageError(f"a merged discovery is shown as table, json, markdown, sarif or html, not {fmt}")
    merged = merge_discoveries([check_discovery(d, str(p)) for p, d in zip(paths, documents)])
    result = from_document(merged, ctx.registry.entries)
    written = save_discovery({k: v for k, v in result.to_dict().items() if k != "run_dir"}
                             | {"merged_from": merged["merged_from"]}, output)
    click.echo(f"kvdiag: merged {len(paths)} discovery shard(s), {len(result.records)} case run(s), "
               f"into {written_as(output, written)}", err=True)
    click.echo(render(result, "text" if fmt == "table" else fmt), nl=False)
    return exit_code(result)


def _merge_scans(paths, documents, output: Path, fmt: str) -> int:
    from kvdiag.engine.scan.cases import scan_exit_code
    from kvdiag.report.scan_text import render_scan_data
    from kvdiag.store.scans import check_scan, merge_scans, save_scan

    if fmt not in (SweepFormat.TABLE.value, SweepFormat.JSON.value):
        raise UsageError(f"a merged scan is shown as table or json, not {fmt} (render formats are for sweeps)")
    output_target(output)
    merged = merge_scans([check_scan(d, str(p)) for p, d in zip(paths, documents)])
    written = save_scan(merged, output)
    click.echo(f"kvdiag: merged {len(paths)} shard(s), {len(merged['cases'])} cases, "
               f"into {written_as(output, written)}", err=True)
    if fmt == SweepFormat.JSON.value:
        click.echo(json.dumps(merged, indent=2, default=str))
    else:
        click.echo(render_scan_data(merged, f"merged: {output}"), nl=False)
    return scan_exit_code(merged["counts"])


@click.command("render")
@click.argument("sweep_file", metavar="SWEEP.json", type=GivenPath(path_type=Path, dir_okay=False))
@FORMAT_OPTION
@click.option("-o", "--output", type=GivenPath(path_type=Path, dir_okay=False),
              help="Write it here (atomically; only a regular file or a new path) instead of stdout.")
def render_cmd(sweep_file, fmt, output) -> int:
    """Render a saved sweep in any format, without running anything.

    Reads any sweep file kvdiag wrote, kvdiag 0.1.x's included (format
    kvdiag-sweep/1: their SARIF paths follow the layout of the recorded build).
    """
    _emit(SweepFormat(fmt).to_formatter().format(load_sweep(sweep_file)), output)
    return 0


@click.command("compare")
@click.argument("before", type=GivenPath(path_type=Path, dir_okay=False))
@click.argument("after", type=GivenPath(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--changed-only", is_flag=True, help="Leave out entries whose verdict and counts did not change.")
@click.pass_obj
def compare_cmd(ctx, before, after, fmt, changed_only) -> int:
    """What changed from sweep BEFORE to sweep AFTER (sweep JSON files).

    Per entry: regression (newly confirmed), fixed (confirmed → not-reproduced),
    applicability changed, other verdict change, unchanged, or only in one sweep;
    with error-count and k/N changes. Exit 1 if any regression, else 0.
    """
    from kvdiag.report.compare import compare_sweeps, render_comparison

    comparison = compare_sweeps(load_sweep(before), load_sweep(after))
    if fmt == "json":
        data = comparison.to_dict()
        if changed_only:
            data["entries"] = [e for e in data["entries"] if e["change"] != "unchanged" or e["notes"]]
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(render_comparison(comparison, all_entries=not changed_only), nl=False)
    return int(ExitCode.CONFIRMED) if comparison.regressions else int(ExitCode.OK)


@click.command("history")
@click.argument("entry_id")
@click.option("--limit", type=Count(1, 100000), default=50, show_default=True,
              help="Show the newest N outcomes.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_obj
def history_cmd(ctx, entry_id, limit, fmt) -> int:
    """An entry's verdicts over builds, commits and machines, oldest first.

    Reads $KVDIAG_HOME/history.sqlite, first adding any finished run of the
    run store not yet recorded (so `kvdiag run` results appear too).
    """
    from tabulate import tabulate

    from kvdiag.store.history import history, sync_run_store
    from kvdiag.store.runs import id_label

    known = True
    try:
        entry_id = ctx.registry.get(entry_id).id
    except UsageError:
        known = False
        entry_id = entry_id.strip().upper()  # an entry since removed from the registry still has a history
    unreadable: list[tuple[str, str]] = []
    sync_run_store(unreadable=unreadable)
    for run_id, why in unreadable:
        if id_label(run_id).upper() == entry_id.upper():
            click.echo(f"kvdiag: run {run_id} cannot be read and is not in this history ({why})", err=True)
    rows = history(entry_id)[-limit:]
    if not rows and not known:
        raise UsageError(f"no defect {entry_id!r} in the registry, and no recorded outcome of it")
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2, default=str))
        return 0
    if not rows:
        click.echo(f"no recorded outcome of {entry_id} (run `kvdiag run {entry_id} --build BUILD` or a sweep)")
        return 0
    table = [(r.date.replace("T", " ")[:16], r.verdict, r.k_of_n, "-" if r.error_count is None else r.error_count,
              (r.build_commit or "?")[:10] + (" +dirty" if r.dirty else ""),
              f"{r.gpu_name or 'no GPU'}" + (f" ({r.cc})" if r.cc else ""), r.driver or "-",
              r.sanitizer_version or "-", (r.machine_key or "-")[:8],
              f"sweep {r.sweep_id}" if r.sweep_id else (r.run_id or "-"), clip(r.reason or "", 50))
             for r in rows]
    click.echo(tabulate(table, headers=["date (UTC)", "verdict", "k/N", "errors", "commit", "GPU", "driver",
                                        "sanitizer", "machine", "from", "reason"], disable_numparse=True))
    return 0


@click.command("report")
@click.argument("entry_id")
@click.option("--run", "run_ref", default="latest", show_default=True, metavar="RUN_ID|latest",
              help="The run to report (default: the entry's newest finished run).")
@click.option("-o", "--output", type=GivenPath(path_type=Path, dir_okay=False), help="Write the report here.")
@click.pass_obj
def report_cmd(ctx, entry_id, run_ref, output) -> int:
    """An upstream-ready Markdown report of one entry's run: paste it into an upstream issue as-is."""
    from kvdiag.home import kvdiag_home
    from kvdiag.report.upstream import find_run, upstream_report
    from kvdiag.store.runs import RunStore

    entry = ctx.registry.get(entry_id)
    run = find_run(RunStore(kvdiag_home()), entry, run_ref)
    _emit(upstream_report(entry, run), output)
    return 0


#: every command of this module, for `cli.add_command`
COMMANDS = (sweep_cmd, merge_cmd, render_cmd, compare_cmd, history_cmd, report_cmd)
