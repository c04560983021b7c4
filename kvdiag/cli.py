"""The `kvdiag` command line. The only module that exits.

Every command raises library errors; `main` turns them into one line on stderr
and a documented exit code (see `kvdiag.exitcodes`). Tests call `main([...])`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

import click
from tabulate import tabulate

from kvdiag import __version__
from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.commands.exits import dispatch, finish
from kvdiag.commands.options import Count, GivenPath, IdList, Seconds, build_option, parse_sets
from kvdiag.errors import UsageError
from kvdiag.exitcodes import EXIT_CODE_TABLE, ExitCode
from kvdiag.fileio import written_as
from kvdiag.commands.scan_options import scan_path_options
from kvdiag.help_text import add_help_blocks, exit_code_lines
from kvdiag.registry.loader import Registry, load_registry
from kvdiag.registry.schema import STATUSES
from kvdiag.workspace.history import HISTORY_ENV
from kvdiag.text import clip

EXIT_HELP = "\n".join(exit_code_lines((int(code), text) for code, text in EXIT_CODE_TABLE))
EPILOG = f"\b\nExit codes:\n{EXIT_HELP}\n\nEach command's help lists the codes it can return, with an example."


class Context:
    """What every command shares: the registry location, loaded on first use."""

    def __init__(self, registry_dir: Path | None):
        self.registry_dir = registry_dir
        self._registry: Registry | None = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = load_registry(self.registry_dir)
        return self._registry


pass_ctx = click.make_pass_decorator(Context)


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvdiag")
@click.option("--registry", "registry_dir", type=GivenPath(path_type=Path), default=None,
              envvar="KVDIAG_REGISTRY", help="Registry folder (default: the project's registry/).")
@click.option("--history", "history_repo", type=GivenPath(path_type=Path, file_okay=False, exists=True), default=None,
              envvar=HISTORY_ENV, help="A clone or mirror of the tree's repository: a tree without .git (a release "
                                       "tarball) or a shallow clone is placed there by its files' blob ids.")
@click.pass_context
def cli(ctx: click.Context, registry_dir: Path | None, history_repo: Path | None) -> None:
    """Reproduce known CUDA defects of llama.cpp-family builds and give honest verdicts.

    \b
    Typical use:
      kvdiag list                    the known defects
      kvdiag show D2 --build BUILD   an entry, and the exact argv it would run
      kvdiag run D2 --build BUILD    one verdict, with the output behind it
      kvdiag doctor                  prove the sanitizer tools work here
    """
    if history_repo is not None:        # every command's target reads it from there (kvdiag.workspace.history)
        os.environ[HISTORY_ENV] = str(history_repo.resolve())
    ctx.obj = Context(registry_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the CLI and map every failure onto a documented exit code.

    As a program (``argv`` None) it also owns the process: SIGINT/SIGTERM/SIGHUP
    handling, and on the way out no run left "running" and no descendant left alive.
    """
    from kvdiag.proc import signals

    own_process = argv is None
    if own_process:
        signals.install()
    else:
        signals.forget()
    args = list(sys.argv[1:] if argv is None else argv)
    code, reason = dispatch(cli, args)
    return finish(code, reason, own_process)


def _report_problems(registry: Registry) -> None:
    for problem in registry.problems:
        click.echo(f"kvdiag: registry problem: {problem}", err=True)


# --------------------------------------------------------------------------- registry browsing

@cli.command("list")
@click.option("--owner", help="Only entries of this owner.")
@click.option("--status", type=click.Choice(STATUSES), help="Only entries with this status.")
@click.option("--tool", type=click.Choice(SANITIZER_TOOLS), help="Only entries using this sanitizer tool.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@pass_ctx
def list_cmd(ctx: Context, owner: str | None, status: str | None, tool: str | None, fmt: str) -> int:
    """The defects of the registry, one line each (an empty registry is exit 65, not an empty table)."""
    registry = ctx.registry
    if not registry.problems:
        registry.require_entries()
    entries = [e for e in registry.entries
               if (not owner or e.owner == owner) and (not status or e.status == status)
               and (not tool or tool in e.tools)]
    if fmt == "json":
        click.echo(json.dumps([{"id": e.id, "title": e.title, "owner": e.owner, "status": e.status,
                                "severity": e.severity, "tools": list(e.tools), "needs": list(e.needs())}
                               for e in entries], indent=2))
    else:
        rows = [(e.id, clip(e.title, 58), e.owner, e.status, ",".join(e.tools) or "-", ", ".join(e.needs()) or "-")
                for e in entries]
        click.echo(tabulate(rows, headers=["id", "title", "owner", "status", "tools", "needs"]))
    _report_problems(registry)
    return int(ExitCode.DATA) if registry.problems else 0


@cli.group("registry")
def registry_group() -> None:
    """Check and export the registry."""


@registry_group.command("lint")
@pass_ctx
def registry_lint(ctx: Context) -> int:
    """Check every entry against the schema; prints every problem as file: key: message.

    Exit 65 with any problem (two files claiming one id among them), and for a
    registry with no entry at all."""
    registry = load_registry(ctx.registry_dir, refuse_duplicates=False)
    for problem in registry.problems:
        click.echo(str(problem))
    if registry.problems:
        click.echo(f"{len(registry.problems)} problem(s) in {registry.root.name}/", err=True)
        return int(ExitCode.DATA)
    registry.require_entries()
    click.echo(f"{len(registry.entries)} entries, no problems")
    return 0


@registry_group.command("verify")
@click.option("--source", "source", type=GivenPath(path_type=Path), required=True,
              help="The source tree the entries' facts are checked against.")
@click.option("--build", "build_dir", type=GivenPath(path_type=Path), default=None,
              help="A configured build of it: CTest tests, CMakeCache options, binaries.")
@click.option("--commit", default=None, help="The tree's commit, for a folder that is not a git checkout "
                                              "(the sites' lines recorded at that commit are checked).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.argument("ids", nargs=-1)
@pass_ctx
def registry_verify(ctx: Context, source: Path, build_dir: Path | None, commit: str | None, fmt: str,
                    ids: tuple[str, ...]) -> int:
    """Check every fact the entries (all, or IDS) name about a tree; print every mismatch as file: key: message.

    Files, tests (CTest names from the build's CTestTestfile.cmake files, or a
    tests/<name>.* source in any language), CMake options, binaries, functions and
    sites, each found by its context: a site at a line no record of this tree names
    is told on stderr; one that is ambiguous or not found is a mismatch. Exits 0 with
    no mismatch, 65 with any.
    """
    from kvdiag.registry.verify import verify_entries
    from kvdiag.workspace.tree import Tree

    if not source.is_dir():
        raise UsageError(f"--source {source} is not a folder")
    if build_dir is not None and not build_dir.is_dir():
        raise UsageError(f"--build {build_dir} is not a folder")
    entries = [ctx.registry.get(i) for i in ids] if ids else list(ctx.registry.entries)
    from kvdiag.commands.verify_ranges import outside_ranges
    outside = outside_ranges(entries, source)
    reports = verify_entries(entries, Tree.open(source, build_dir, commit=commit), outside)
    mismatches = [m for r in reports for m in r.mismatches]
    if fmt == "json":
        click.echo(json.dumps({"source": str(source), "build": str(build_dir) if build_dir else None,
                               "mismatches": len(mismatches), "entries": [r.to_dict() for r in reports]}, indent=2))
    else:
        for m in mismatches:
            click.echo(str(m))
        for r in reports:
            if r.other_tree:
                click.echo(f"{r.file}: not this tree's defect ({r.other_tree}): its other facts not checked", err=True)
            for why in r.unknown:
                click.echo(f"{r.file}: not checked: {why}", err=True)
            for fact in r.outside:
                click.echo(f"{r.file}: {fact}: as the range says ({outside[r.entry_id]})", err=True)
            for place in r.sites:
                if place.unrecorded:
                    click.echo(f"{r.file}: {place.key}: {place.describe()}", err=True)
        checked = sum(r.checked for r in reports)
        click.echo(f"{len(reports)} entries, {checked} facts checked, {len(mismatches)} mismatch(es)",
                   err=bool(mismatches))
    _report_problems(ctx.registry)
    return int(ExitCode.DATA) if mismatches or ctx.registry.problems else 0


@registry_group.command("export")
@click.option("--format", "fmt", type=click.Choice(["osv"]), default="osv", show_default=True)
@click.option("--output", "output_dir", type=GivenPath(path_type=Path, file_okay=False),
              help="Write one <id>.json per entry into this folder, as an OSV database keeps them.")
@click.argument("ids", nargs=-1)
@pass_ctx
def registry_export(ctx: Context, fmt: str, output_dir: Path | None, ids: tuple[str, ...]) -> int:
    """Export entries (all, or the IDS given) as OSV records (schema 1.7.5).

    Without --output, one JSON list. They validate against the official OSV
    schema but for the id: KVDIAG- is a private prefix, not a registered database.
    """
    from kvdiag.registry.osv import entry_to_osv, write_osv_database

    registry = ctx.registry
    entries = [registry.get(i) for i in ids] if ids else list(registry.require_entries())
    records = [entry_to_osv(e) for e in entries]
    if output_dir is None:
        click.echo(json.dumps(records, indent=2))
    else:
        written = write_osv_database(records, output_dir)
        linked = [written_as(path, target) for path, target in written if path != target]
        through = f"; {len(linked)} through a symlink: {', '.join(linked)}" if linked else ""
        click.echo(f"kvdiag: wrote {len(written)} OSV record(s) to {output_dir}{through}", err=True)
    return 0


@cli.command("show")
@click.argument("entry_id")
@build_option("A build folder: also print the exact argv each step would run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@pass_ctx
def show_cmd(ctx: Context, entry_id: str, build_dir: Path | None, fmt: str) -> int:
    """One entry in full; with --build, the commands it would run against that build."""
    from kvdiag.report.entry_text import render_entry

    entry = ctx.registry.get(entry_id)
    plans = None
    if build_dir is not None:
        from kvdiag.engine.verdict.show import plan_commands_for_display

        plans = plan_commands_for_display(entry, build_dir)
    if fmt == "json":
        out = {"id": entry.id, "front_matter": _jsonable(entry.raw), "body": entry.body}
        if plans is not None:
            out["commands"] = plans
        click.echo(json.dumps(out, indent=2, default=str))
    else:
        click.echo(render_entry(entry, plans))
    return 0


# --------------------------------------------------------------------------- verdict runs

@cli.command("run")
@click.argument("ids", nargs=-1)
@build_option()
@click.option("--step", help="Run this repro step instead of the entry's default.")
@click.option("--runs", type=Count(1, 1000), help="Override the number of runs (flaky defects).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a step variable, e.g. params=hsk=64.")
@click.option("--timeout", type=Seconds(86400), metavar="SECONDS",
              help="Limit each step to this many seconds (default: the step's own budget).")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--no-staleness", is_flag=True, help="Skip the build-tool dry run (D13's check).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object for one entry, one array for several.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@pass_ctx
def run_cmd(ctx: Context, ids, build_dir, step, runs, sets, timeout, sanitizer, no_staleness, fmt, quiet) -> int:
    """Run defects' repros against a build and give one verdict each.

    With no IDS, every entry of the registry runs. With neither IDS nor a build
    (no --build and no $LLAMA_KV_BUILD), kvdiag runs its own canary suite instead
    and says what this machine can and cannot check; IDS without a build are
    still run, and an entry that needs a build's binary is skipped.

    Exit code: the verdict's (see `kvdiag --help`); with several entries, 1 if
    any is confirmed, else 70 if any errored, else 4 if any is inconclusive,
    else 0 if any is not-reproduced; when none was judged, 3 if any was
    skipped, else 2.
    """
    from kvdiag.commands.runs import run_and_show

    if build_dir is None and not ids:
        return _doctor(None, refresh=False, fmt=fmt, sanitizer=sanitizer,
                       preface="no build given (--build or $LLAMA_KV_BUILD): running kvdiag's canary suite")
    from kvdiag.engine.run.overrides import validated_sets

    if build_dir is not None and not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    from kvdiag.proc.slots import check_slots_setting

    check_slots_setting()
    named = {e.id: e for e in (ctx.registry.get(i) for i in ids)}     # `run D2 d2` runs D2 once
    entries = list(named.values()) if ids else list(ctx.registry.require_entries())
    overrides = validated_sets(parse_sets(sets), entries, step)
    outcomes = run_and_show(entries, build_dir, step=step, runs=runs, overrides=overrides,
                            sanitizer=sanitizer, check_staleness=not no_staleness, fmt=fmt, quiet=quiet,
                            step_budget=timeout)
    return _combined_exit(outcomes)


def _combined_exit(outcomes) -> int:
    from kvdiag.records.verdict import combined_exit_code

    return combined_exit_code([o.verdict for o in outcomes], any(o.extra.get("interrupted") for o in outcomes))


@cli.command("scan")
@click.argument("entry_id")
@build_option(required=True)
@click.option("-j", "--jobs", type=Count(1, 64), default=None,
              help="Parallel processes per GPU (default: a scan's slot pool, one per 8 GiB of GPU memory, at most 16 "
                   "and the host's cores, or $KVDIAG_GPU_SLOTS; on several GPUs, that many in all, shared).")
@click.option("--op", help="Override the entry's op.")
@click.option("--params", help="Override the entry's case-space regex (test-backend-ops -p).")
@click.option("--limit", type=Count(1, 100000), help="Run only the first N supported cases.")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--devices", type=IdList("0,1"), metavar="I,J", help="GPUs to spread the cases over (default: every visible one).")
@click.option("--batch", type=Count(0, 128), default=0, show_default=True,
              help="Cases per process: 0 gives each worker two batches (at most 128 cases each), "
                   "1 runs one process per case; up to 128.")
@click.option("--shard", metavar="I/N|auto",
              help="Run shard I of N (from 1) of the cases, each case's shard fixed by its name; auto: I and N "
                   "from a Slurm job array, a Kubernetes Indexed Job or GitLab parallel: (docs/fleets.md).")
@click.option("--save", type=GivenPath(path_type=Path, dir_okay=False),
              help="Also save the scan JSON here, for `kvdiag merge` (it is always saved under the run store).")
@scan_path_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "sarif"]), default="text",
              show_default=True)
@pass_ctx
def scan_cmd(ctx: Context, entry_id, build_dir, jobs, op, params, limit, sanitizer, devices, batch, shard, save,
             fmt, **path_options) -> int:
    """Every affected shape: every test case judged on its own output, in parallel, aggregated.

    Without --params the case space is the entry's measured radius for this tree
    (`kvdiag registry radius`), else its [scan]. The output groups the cases by kernel
    instantiation: affected, clean (launched under the detector, no finding), never reached.

    A sanitized scan routes first (every case bare, its kernel launches listed) and sanitizes
    only the cases that reach the entry's kernels, once every case is routed (--overlap:
    each batch as soon as its cases are). Cases run several to a process (a host
    starts only a few CUDA processes per second); each case's findings are those printed
    with it, and a case a batch cannot judge runs again alone. With several GPUs, -j is per GPU and every case
    names the GPU it ran on. With --shard, the cases are dealt by name: the
    shards' saved scans merge (`kvdiag merge`) into the whole scan.

    Exit 1 if any case is affected, 4 if none is but some case was inconclusive,
    else 0; when the entry cannot be scanned here, the exit code of that verdict
    (2 not-applicable, 3 skipped).
    """
    import os

    from kvdiag.commands.runs import ScanNotRun, scan_and_show
    from kvdiag.engine.scan.cases import scan_exit_code
    from kvdiag.fileio import prepare_output
    from kvdiag.proc.slots import check_slots_setting
    from kvdiag.shards import resolve_shard

    entry = ctx.registry.get(entry_id)
    if not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    chosen = resolve_shard(shard, os.environ)
    check_slots_setting()
    if save is not None:
        prepare_output(save)             # refuse a FIFO, a device or an unwritable place before the scan runs
    try:
        result = scan_and_show(entry, build_dir, jobs=jobs, op=op, params=params, limit=limit, sanitizer=sanitizer,
                               fmt=fmt, devices=devices, batch=batch, shard=chosen, save=save, **path_options)
    except ScanNotRun as exc:
        from kvdiag.records.verdict import Verdict

        click.echo(f"kvdiag: {exc}", err=True)
        return int(Verdict(exc.verdict).exit_code)
    return scan_exit_code(result.to_dict()["counts"], result.interrupted)


@cli.command("drift")
@click.argument("entry_id", required=False)
@build_option(required=True)
@click.option("--op", help="The op (default: the entry's drift op).")
@click.option("--params", help="Case regex (default: the entry's drift params).")
@click.option("--runs", type=Count(1, 1000), help="Repetitions (default: the entry's, else 5).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@pass_ctx
def drift_cmd(ctx: Context, entry_id, build_dir, op, params, runs, fmt) -> int:
    """Numeric drift of (quantized) cases over repeated runs: fails, errors, margin to the threshold."""
    from kvdiag.commands.runs import drift_and_show

    entry = ctx.registry.get(entry_id) if entry_id else None
    criterion = entry.drift if entry else None
    op = op or (criterion.op if criterion else None)
    params = params or (criterion.params if criterion else None)
    if not op or not params:
        raise UsageError("drift needs an entry with a [drift] section, or --op and --params")
    verdict = drift_and_show(entry, build_dir, op=op, params=params,
                             runs=runs or (criterion.runs if criterion else 5), fmt=fmt)
    from kvdiag.records.verdict import Verdict

    return int(Verdict(verdict).exit_code)


@cli.command("analyze")
@click.argument("log", type=GivenPath(path_type=Path))
@click.option("--tool", type=click.Choice(SANITIZER_TOOLS),
              help="The sanitizer tool (detected from the text when omitted).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def analyze_cmd(log: Path, tool: str | None, fmt: str) -> int:
    """Parse a compute-sanitizer log you already have (a .gz is fine): findings by site, counts, kernels."""
    from kvdiag.report.analysis import analyze_log

    if not log.is_file():
        raise UsageError(f"no such log file: {log}")
    click.echo(analyze_log(log, tool=tool, fmt=fmt), nl=False)
    return 0


@cli.command("runs")
@click.option("--limit", type=Count(1, 10000), default=20, show_default=True)
@click.option("--entry", help="Only runs of this entry.")
@pass_ctx
def runs_cmd(ctx: Context, limit: int, entry: str | None) -> int:
    """Recorded runs, newest last (the run store is $KVDIAG_HOME/runs).

    A run whose kvdiag process is gone without finishing it shows as `abandoned`;
    a run.json that cannot be read is listed as such, never left out."""
    from kvdiag.errors import RunUnreadable
    from kvdiag.home import kvdiag_home
    from kvdiag.store.runs import RunStore, displayed_status

    if entry:
        entry = ctx.registry.get(entry).id
    rows = []
    for run in RunStore(kvdiag_home()).all_dirs():
        try:
            data = run.read_checked()
        except RunUnreadable as exc:
            if not entry or run.label.upper() == entry.upper():
                rows.append((run.run_id, run.label, "unreadable", clip(exc.why, 70), ""))
            continue
        if entry and data.get("entry") != entry:
            continue
        outcome = data.get("outcome") or {}
        status = displayed_status(data)
        shown = outcome.get("verdict", status) if status == "finished" else status
        rows.append((run.run_id, data.get("entry"), shown,
                     clip(outcome.get("reason", data.get("reason") or ""), 70), outcome.get("duration_s", "")))
    click.echo(tabulate(rows[-limit:], headers=["run", "entry", "verdict", "reason", "s"]))
    return 0


@cli.command("doctor")
@build_option("Also check this build (staleness, -lineinfo).")
@click.option("--refresh", is_flag=True, help="Re-run the controls even if cached for this machine.")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def doctor_cmd(build_dir, refresh, sanitizer, fmt) -> int:
    """Check this machine and prove each sanitizer tool works here, with canary kernels.

    Exit 0: every tool's positive control was detected and its negative was clean.
    Exit 4: some control failed or could not run. Exit 3: no GPU or no sanitizer.
    """
    return _doctor(build_dir, refresh=refresh, fmt=fmt, sanitizer=sanitizer)


def _doctor(build_dir, *, refresh: bool, fmt: str, sanitizer, preface: str | None = None) -> int:
    from kvdiag.commands.runs import doctor_and_show

    return doctor_and_show(build_dir, refresh=refresh, fmt=fmt, sanitizer=sanitizer, preface=preface)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def _register_commands() -> None:
    """Commands that live in their own modules (one axis each), added to the group here."""
    from kvdiag.commands.bisect import COMMANDS as BISECT_COMMANDS
    from kvdiag.commands.discover import COMMANDS as DISCOVER_COMMANDS
    from kvdiag.commands.probes import COMMANDS as PROBE_COMMANDS
    from kvdiag.commands.sweeps import COMMANDS as SWEEP_COMMANDS

    from kvdiag.commands.model import model_group

    from kvdiag.commands.radius import registry_radius

    for command in (*PROBE_COMMANDS, *BISECT_COMMANDS, *SWEEP_COMMANDS, *DISCOVER_COMMANDS, model_group):
        cli.add_command(command)
    registry_group.add_command(registry_radius)
    add_help_blocks(cli)


_register_commands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
