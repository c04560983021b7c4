"""``kvdiag probe …`` and ``kvdiag verify`` (``kvdiag bisect`` is in :mod:`kvdiag.commands.bisect`).

Registered in kvdiag/cli.py with ``cli.add_command``; each takes the CLI's
``Context`` (for ``.registry``) through ``click.pass_obj``. Like every command,
they return an exit code and raise kvdiag's errors for ``main`` to print.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click
from tabulate import tabulate

from kvdiag.commands.options import Count, GivenPath, Seconds, build_option
from kvdiag.errors import UsageError
from kvdiag.exitcodes import ExitCode

PROBES_HELP = "Folder of probe files (default: the project's probes/)."


def _probe_set(probes_dir: Path | None):
    from kvdiag.probes.patch import load_probes

    return load_probes(probes_dir)


def _probes_option(fn):
    return click.option("--probes", "probes_dir", type=GivenPath(path_type=Path), envvar="KVDIAG_PROBES",
                        default=None, help=PROBES_HELP)(fn)


def _registry(obj):
    if obj is None or not hasattr(obj, "registry"):
        from kvdiag.registry.loader import load_registry

        return load_registry(None)
    return obj.registry


# --------------------------------------------------------------------------- probe


@click.group("probe")
def probe_group() -> None:
    """Probe patches: list them, check a stack applies, apply it to a scratch worktree, revert, drop.

    Probes are applied only in worktrees kvdiag makes (`git worktree add --detach`),
    never in your working tree. In a llama.cpp tree ggml lives under ggml/: kvdiag
    sees that and applies with --directory=ggml.
    """


@probe_group.command("list")
@_probes_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def probe_list(probes_dir: Path | None, fmt: str) -> int:
    """Every probe: name, defect, kind, whether output stays correct, where it applies, what it requires."""
    probes = _probe_set(probes_dir)
    if fmt == "json":
        click.echo(json.dumps([p.to_dict() for p in probes], indent=2))
    else:
        click.echo(tabulate([_list_row(p) for p in probes],
                            headers=["name", "defect", "kind", "output-correct", "repository@commit", "requires"]))
    for problem in probes.problems:
        click.echo(f"kvdiag: probe problem: {problem}", err=True)
    return int(ExitCode.DATA) if probes.problems else 0


def _list_row(probe) -> tuple[str, ...]:
    correct = {True: "yes", False: "no", None: "to check"}[probe.keeps_output_correct]
    repo = probe.repository.rstrip("/").removesuffix(".git")
    repo = "/".join(repo.split("/")[-2:]) if "://" in repo else repo
    return (probe.name, probe.defect, probe.kind, correct, f"{repo}@{probe.commit[:12]}",
            ", ".join(probe.requires) or "-")


@probe_group.command("check")
@click.argument("names", nargs=-1, required=True)
@click.option("--source", type=GivenPath(path_type=Path), required=True, help="The git checkout to check against.")
@click.option("--commit", default="HEAD", show_default=True, help="The commit of SOURCE to check against.")
@_probes_option
def probe_check(names: tuple[str, ...], source: Path, commit: str, probes_dir: Path | None) -> int:
    """Dry-run a stack: `git apply --check` of each probe, in order, on a temporary worktree.

    Exit 0 when every probe applies on top of the ones before it; 1 naming the
    probe that does not, what it conflicts with, and git's own error lines.
    """
    from kvdiag.probes.stack import check_stack, order_stack

    stack = order_stack(names, _probe_set(probes_dir))
    with tempfile.TemporaryDirectory(prefix="kvdiag-probe-check-") as logs:
        result = check_stack(source, commit, stack, log_dir=Path(logs))
    click.echo(f"stack on {result.commit[:12]}: {' -> '.join(p.name for p in result.order)}")
    for line in result.lines():
        click.echo(line)
    return 0 if result.ok else int(ExitCode.CONFIRMED)


@probe_group.command("apply")
@click.argument("names", nargs=-1, required=True)
@click.option("--into", "into", type=GivenPath(path_type=Path), required=True,
              help="Worktree folder: created (absent or empty), or one `probe apply` made before.")
@click.option("--source", type=GivenPath(path_type=Path), help="The git checkout (not needed to add to an existing worktree).")
@click.option("--commit", default="HEAD", show_default=True, help="The commit of SOURCE the worktree starts at.")
@_probes_option
def probe_apply(names: tuple[str, ...], into: Path, source: Path | None, commit: str, probes_dir: Path | None) -> int:
    """Make a worktree at INTO with the stack applied, and print its path (build there).

    The worktree is kvdiag's (recorded in INTO/.kvdiag-probes.json): `kvdiag probe
    revert` takes probes out again, `kvdiag probe drop INTO` removes it.
    """
    from kvdiag.probes.stack import explain_conflict, order_stack
    from kvdiag.probes.worktree import RECORD_FILE, Worktree, add_worktree, read_record, remove_worktree

    probes = _probe_set(probes_dir)
    stack = order_stack(names, probes)
    with tempfile.TemporaryDirectory(prefix="kvdiag-probe-apply-") as tmp:
        logs = Path(tmp)
        existing = (into / RECORD_FILE).is_file()
        if existing:
            record = read_record(into)
            worktree = Worktree(path=into.absolute(), source=Path(record["source"]), commit=record["commit"],
                                log_dir=logs, applied=list(record.get("applied", [])))
        else:
            if source is None:
                raise UsageError(f"--source is needed to make a new worktree at {into}")
            worktree = add_worktree(source, commit, into, logs)
        applied_before = list(worktree.applied)
        todo = [p for p in stack if p.name not in worktree.applied]
        for i, probe in enumerate(todo):
            checked = worktree.check(probe)
            if not checked.ok or not worktree.apply(probe).ok:
                earlier = [probes.get(n) for n in applied_before] + todo[:i]
                click.echo(f"FAIL {probe.name}", err=True)
                if existing:
                    click.echo(f"{probe.name} does not apply on top of {', '.join(worktree.applied) or 'the commit'}:",
                               err=True)
                    for line in checked.errors:
                        click.echo(f"  {line}", err=True)
                    for done in reversed(todo[:i]):
                        worktree.revert(done)
                    worktree.write_record()
                else:
                    conflict = explain_conflict(worktree, probe, earlier, checked)
                    click.echo(conflict.describe(worktree.commit) + ":", err=True)
                    for line in conflict.errors:
                        click.echo(f"  {line}", err=True)
                    remove_worktree(worktree.source, worktree.path, logs)
                    click.echo(f"worktree {into} removed", err=True)
                return int(ExitCode.CONFIRMED)
            click.echo(f"applied {probe.name}" + (f" (--directory={checked.directory})" if checked.directory else ""),
                       err=True)
        worktree.write_record()
    click.echo(str(worktree.path))
    return 0


@probe_group.command("revert")
@click.argument("names", nargs=-1)
@click.option("--worktree", "worktree_dir", type=GivenPath(path_type=Path), required=True,
              help="A worktree made by `kvdiag probe apply`.")
@_probes_option
def probe_revert(names: tuple[str, ...], worktree_dir: Path, probes_dir: Path | None) -> int:
    """Take probes out again (`git apply -R`, in reverse order); with no NAMES, all of them."""
    from kvdiag.probes.worktree import Worktree, read_record

    record = read_record(worktree_dir)
    probes = _probe_set(probes_dir)
    applied = list(record.get("applied", []))
    wanted = list(names) or applied
    unknown = [n for n in wanted if n not in applied]
    if unknown:
        raise UsageError(f"not applied in {worktree_dir}: {', '.join(unknown)} (applied: {', '.join(applied) or 'none'})")
    staying = [probes.get(n) for n in applied if n not in wanted]
    for probe in staying:
        needed = [r for r in probe.requires if r in wanted]
        if needed:
            raise UsageError(f"{probe.name} stays applied and requires {', '.join(needed)}: revert it too")
    with tempfile.TemporaryDirectory(prefix="kvdiag-probe-revert-") as tmp:
        worktree = Worktree(path=worktree_dir.absolute(), source=Path(record["source"]), commit=record["commit"],
                            log_dir=Path(tmp), applied=applied)
        for name in reversed(applied):
            if name not in wanted:
                continue
            probe = probes.get(name)
            result = worktree.revert(probe)
            if not result.ok:
                worktree.write_record()
                click.echo(f"{name} cannot be reverted (the worktree was edited?):", err=True)
                for line in result.errors:
                    click.echo(f"  {line}", err=True)
                return int(ExitCode.CONFIRMED)
            click.echo(f"reverted {name}")
        worktree.write_record()
    return 0


@probe_group.command("drop")
@click.argument("worktree_dir", type=GivenPath(path_type=Path))
def probe_drop(worktree_dir: Path) -> int:
    """Remove a worktree `kvdiag probe apply` made (`git worktree remove --force`, then prune)."""
    from kvdiag.probes.worktree import read_record, remove_worktree

    record = read_record(worktree_dir)
    with tempfile.TemporaryDirectory(prefix="kvdiag-probe-drop-") as tmp:
        problems = remove_worktree(Path(record["source"]), worktree_dir.absolute(), Path(tmp))
    for problem in problems:
        click.echo(f"kvdiag: {problem}", err=True)
    if worktree_dir.exists():
        raise UsageError(f"{worktree_dir} could not be removed")
    click.echo(f"removed {worktree_dir}")
    return 0


# --------------------------------------------------------------------------- verify


def _recipe(entry, configure_cmd, build_cmd, reference, jobs, build_timeout=None, launcher=None):
    from kvdiag.workspace.scratch_build import BUILD_TIMEOUT_S, BuildRecipe

    return BuildRecipe(configure_cmd=configure_cmd, build_cmd=build_cmd, reference=reference,
                       targets=entry.requires.binaries, jobs=jobs,
                       build_timeout=build_timeout or BUILD_TIMEOUT_S, launcher=launcher)


def _inspect(build_dir: Path | None):
    if build_dir is None:
        return None
    from kvdiag.workspace.build import inspect_build

    with tempfile.TemporaryDirectory(prefix="kvdiag-inspect-") as tmp:
        return inspect_build(build_dir, log_dir=Path(tmp), check_staleness=False)


@click.command("verify")
@click.argument("entry_id")
@click.option("--source", type=GivenPath(path_type=Path), required=True, help="The git checkout the fix applies to.")
@click.option("--probe", "probe_names", multiple=True, required=True, help="A fix probe (repeat for a stack).")
@build_option("Your build: BEFORE runs against it, and its CMake configuration is reused for AFTER.")
@click.option("--configure-cmd", help="Configure command; {source} and {build} are substituted (no shell).")
@click.option("--build-cmd", help="Build command; {source}, {build} and {jobs} are substituted (no shell).")
@click.option("--commit", default="HEAD", show_default=True, help="The commit of SOURCE to apply the fix to.")
@click.option("--keep", is_flag=True, help="Keep the scratch worktree and build.")
@click.option("-j", "--jobs", type=Count(1, 1024), help="Build jobs (default: the CPU count).")
@click.option("--numeric-params", help="Also run the numeric test over this case regex (e.g. hsk=256).")
@click.option("--step", help="The repro step (default: the entry's default).")
@click.option("--runs", type=Count(1, 1000),
              help="Runs of each arm (flaky defects; default: the step's). With --before, of the AFTER arm "
                   "alone (default: as many as the reused run made).")
@click.option("--before", "before_run", metavar="RUN_ID|latest",
              help="Reuse this recorded run of the entry (`kvdiag run`) as the BEFORE arm instead of running it "
                   "again; 'latest' is the entry's newest run. Refused, naming what differs, unless it is the same "
                   "arm: same build and its files, model file, step, argv template, signature, all its runs "
                   "finished. Needs --build.")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--build-timeout", type=Seconds(10**6), help="Seconds a build may take (default 4 h).")
@_probes_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.pass_obj
def verify_cmd(obj, entry_id, source, probe_names, build_dir, configure_cmd, build_cmd, commit, keep, jobs,
               numeric_params, step, runs, before_run, sanitizer, build_timeout, probes_dir, fmt, quiet) -> int:
    """Verify a fix: the repro before and after the probe stack, and the numeric test.

    Verified means confirmed before the probes, not reproduced after them, and
    the numeric test still passing on the patched build; for an entry run several
    times, also that Fisher's exact test tells the two rates apart.
    """
    from kvdiag.commands.progress import progress_display
    from kvdiag.workspace.scratch_build import BuildFailed
    from kvdiag.engine.verify.session import VerifyRequest, verify_fix
    from kvdiag.report.verify_text import render_report
    from kvdiag.home import kvdiag_home
    from kvdiag.probes.stack import order_stack

    entry = _registry(obj).get(entry_id)
    stack = order_stack(probe_names, _probe_set(probes_dir))
    if build_dir is not None and not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    reference = _inspect(build_dir)
    recipe = _recipe(entry, configure_cmd, build_cmd, reference, jobs, build_timeout)
    if before_run is not None and build_dir is None:
        raise UsageError("--before needs --build: a recorded run is reused only against the build it ran on")
    request = VerifyRequest(entry=entry, source=source, stack=stack, recipe=recipe, build_dir=build_dir,
                            commit=commit, keep=keep, numeric_params=numeric_params, sanitizer=sanitizer, step=step,
                            runs=runs, before_run=before_run)
    try:
        with progress_display(quiet or fmt != "text") as progress:
            report = verify_fix(request, home=kvdiag_home(), progress=progress)
    except BuildFailed as exc:
        click.echo(f"kvdiag: {exc.report()}", err=True)
        click.echo("kvdiag: scratch worktree and build removed" if not keep else "kvdiag: scratch tree kept (--keep)",
                   err=True)
        return int(ExitCode.INCONCLUSIVE)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        click.echo(render_report(report), nl=False)
    return report.exit_code


COMMANDS = (probe_group, verify_cmd)
