"""`kvdiag discover`: every op of the suite under every trusted sanitizer tool, grouped into roots.

A thin command over engine.discover: it reads the options, runs the discovery with a progress
display, writes the drafts of the new roots where asked, and prints the result in one format.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from kvdiag.commands.options import Count, GivenPath, IdList, Seconds, build_option
from kvdiag.commands.progress import progress_display
from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.errors import ScanNotRun, UsageError

DISCOVER_HELP = """Find the defects nobody registered: every case of every op, under each tool, grouped into roots.

The case space is every case `test-backend-ops support` lists for the backend (--ops and
--params narrow it). Cases run several to a sanitized process, in parallel on the GPU's slot
pool, the heaviest processes first by measured cost (this machine's newest discoveries, else
kvdiag's recorded runs); each case's findings are those printed with it. A process that aborts or overruns its
budget is split and its cases run again; a case alone that aborts is judged `aborted` (the
abort is a root of its own kind at its line), one that still overruns is `cut`, with why.
Findings are grouped by (tool, kind, site file:line, function without template arguments):
one row per root, with the kernels that reached it, its ops and cases, its smallest case (the
repro), its error count, and whether the numeric test failed too. Each root is matched
against the registry (its entry named) or marked new; --draft-into writes one draft entry per
new root, which lints and confirms as written (`kvdiag --registry DIR run D14 --build B`).
Racecheck warnings are listed apart and are not roots unless --warnings. Racecheck sees only
shared memory, so it is spared the cases whose launches hold none (--no-route: every case).
Under an MPS daemon (CUDA_MPS_PIPE_DIRECTORY, or one in /tmp/nvidia-mps) the processes' kernels
share the GPU at once; kvdiag never starts one, and records and reports the one it found.
"""


def _tools(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    tools = tuple(t.strip() for t in value.split(",") if t.strip())
    bad = [t for t in tools if t not in SANITIZER_TOOLS]
    if bad or not tools:
        raise UsageError(f"--tool {value!r}: each must be one of {', '.join(SANITIZER_TOOLS)}")
    return tools


def _ops(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    ops = tuple(o.strip() for o in value.split(",") if o.strip())
    bad = [o for o in ops if not o.replace("_", "").isalnum()]
    if bad or not ops:
        raise UsageError(f"--ops {value!r}: a comma-separated list of op names (e.g. CPY,SOFT_MAX)")
    return ops


@click.command("discover", help=DISCOVER_HELP)
@build_option(required=True)
@click.option("--tool", "tool_list", metavar="T,T", help=f"Tools ({','.join(SANITIZER_TOOLS)}); default: those "
              "whose control passed on this machine (`kvdiag doctor`).")
@click.option("--ops", "op_list", metavar="OP,OP", help="Only these ops (test-backend-ops -o).")
@click.option("--params", help="Only the cases whose parameters match this regex (test-backend-ops -p).")
@click.option("-j", "--jobs", type=Count(1, 64), default=None,
              help="Sanitized processes at a time (default: the GPU's slot pool, as a scan's).")
@click.option("--batch", type=Count(0, 128), default=0, show_default=True,
              help="Cases per process: 0 spreads the suite evenly over the workers (at most 32), 1 one per case.")
@click.option("--case-budget", type=Seconds(3600), default=120.0, show_default=True,
              help="Seconds a case may take; a process gets one budget per case and stops after one budget of "
                   "silence, then its cases are split and run again.")
@click.option("--shard", metavar="I/N|auto", help="Run shard I of N of the cases (merged by `kvdiag merge`).")
@click.option("--save", type=GivenPath(path_type=Path, dir_okay=False),
              help="Also save the discovery JSON here (it is always saved under the run store).")
@click.option("--draft-into", type=GivenPath(path_type=Path, file_okay=False),
              help="Write one draft registry entry per new root into this folder.")
@click.option("--warnings", "with_warnings", is_flag=True,
              help="Count racecheck warnings as roots too (drafts and the exit code).")
@click.option("--new-only", is_flag=True, help="Exit 1 only for a new root (one no entry matches).")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--program", type=click.Choice(["auto", "plain"]), default="auto", show_default=True,
              help="auto: sanitized cases run in the launch probe's GPU-only mode where kvdiag can make it (no CPU "
                   "reference), and the cases with findings run again in test mode for the numeric test; plain: the "
                   "build's own test-backend-ops in test mode.")
@click.option("--route/--no-route", default=True, show_default=True,
              help="Run racecheck only on the cases whose launches hold shared memory (the only memory it "
                   "checks), the launches listed by the other tools' processes or by a pass without a sanitizer; "
                   "needs the launch probe's program. --no-route sanitizes every case under racecheck.")
@click.option("--backtrace", type=click.Choice(["auto", "device", "no"]), default="auto", show_default=True,
              help="Each record's device frames (the sanitizer's --show-backtrace). auto: synccheck without "
                   "them (capturing them is most of what a record costs where a defect reports in every "
                   "thread; its records name the barrier's own line), the other tools with them. no: no tool "
                   "gets them; device: every tool does. A root whose records name no launching kernel (no "
                   "frames; racecheck's race records never have them) gets it from its smallest case run once "
                   "more alone: with frames, or for racecheck with its launches listed.")
@click.option("--racecheck-workers", type=Count(0, 64), default=None, metavar="N",
              help="Host threads of each racecheck process (the sanitizer's --racecheck-num-workers); 0 or "
                   "unset: the tool's own choice, made as if its process ran alone on the host, and the "
                   "fastest measured on a 16-core H100 host (1 worker: 1.55 times the process time).")
@click.option("--devices", type=IdList("0,1"), metavar="I,J", help="GPUs to spread the processes over.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "sarif", "html"]), default="text",
              show_default=True)
@click.pass_obj
def discover_cmd(ctx, build_dir, tool_list, op_list, params, jobs, batch, case_budget, shard, save, draft_into,
                 with_warnings, new_only, sanitizer, program, route, backtrace, racecheck_workers, devices,
                 fmt) -> int:
    from kvdiag.engine.discover.session import run_discover
    from kvdiag.fileio import prepare_output, written_as
    from kvdiag.report.discover_formats import exit_code, render
    from kvdiag.shards import resolve_shard
    from kvdiag.store.discoveries import save_discovery

    tools, ops = _tools(tool_list), _ops(op_list)
    chosen = resolve_shard(shard, os.environ)
    if save is not None:
        prepare_output(save)
    if draft_into is not None and draft_into.exists() and not draft_into.is_dir():
        raise UsageError(f"--draft-into {draft_into}: not a folder")
    registry = ctx.registry
    try:
        with progress_display(fmt != "text") as progress:
            result = run_discover(build_dir, entries=registry.entries, tools=tools, ops=ops, params=params,
                                  jobs=jobs, case_budget_s=case_budget, batch=batch, shard=chosen,
                                  sanitizer=sanitizer, devices=devices, registry=str(registry.root),
                                  program=program, route=route, backtrace=backtrace,
                                  racecheck_workers=racecheck_workers, progress=progress)
    except ScanNotRun as exc:
        from kvdiag.records.verdict import Verdict

        click.echo(f"kvdiag: {exc}", err=True)
        return int(Verdict(exc.verdict).exit_code)
    result.count_warnings = with_warnings
    if save is not None:
        written = save_discovery(result.to_dict(), save)
        click.echo(f"kvdiag: discovery saved to {written_as(save, written)}", err=True)
    if draft_into is not None:
        for line in write_drafts_for(result, draft_into, registry):
            click.echo(f"kvdiag: {line}", err=True)
    click.echo(render(result, fmt), nl=False)
    return exit_code(result, new_only=new_only)


def write_drafts_for(result, folder: Path, registry) -> list[str]:
    """Draft the result's new roots into ``folder`` (ids after the registry's and the folder's own)."""
    from kvdiag.engine.discover.draft import DraftContext
    from kvdiag.engine.discover.drafting import write_drafts
    from kvdiag.registry.loader import load_registry

    build = (result.target or {}).get("build") or {}
    git = build.get("git") or {}
    source_dir = Path(build["source_dir"]) if build.get("source_dir") else None
    folder.mkdir(parents=True, exist_ok=True)
    drafted = load_registry(folder).entries if any(folder.glob("D*.md")) else ()
    context = DraftContext(entry_id="", commit=git.get("commit"), tree=(source_dir.name if source_dir else "a tree"),
                           run=result.run_dir.name if result.run_dir else None)
    written, kept = write_drafts(result.new_roots, folder, taken=[e.id for e in registry.entries], context=context,
                                 source_dir=source_dir, drafted=drafted)
    return [f"drafted {entry_id}: {path}" for entry_id, path in written] + kept


COMMANDS = (discover_cmd,)
