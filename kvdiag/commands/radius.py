"""`kvdiag registry radius`: a saved scan's measured blast radius, written into the entry.

The entry file changes only in its ``[[radius]]`` table of the scanned tree (kvdiag.registry
.radius); the result is linted before it is written, and a result the linter refuses is
not written (exit 65, the problems printed).
"""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import click

from kvdiag.commands.options import GivenPath
from kvdiag.errors import DataError, UsageError
from kvdiag.exitcodes import ExitCode
from kvdiag.fileio import read_json, write_atomic, written_as
from kvdiag.registry.lint import lint_raw
from kvdiag.registry.radius import RadiusWriteError, table_text, write_radius
from kvdiag.registry.raw import FRONT_MATTER, RawEntry


def _lint_text(path: Path, text: str) -> list[str]:
    match = FRONT_MATTER.match(text)
    if not match:
        return [f"{path.name}: (file): no ```toml front matter"]
    try:
        data = tomllib.loads(match.group("toml"))
    except tomllib.TOMLDecodeError as exc:
        return [f"{path.name}: (file): TOML does not parse: {exc}"]
    return [str(p) for p in lint_raw(RawEntry(path=path, data=data, body=match.group("body")))]


@click.command("radius")
@click.argument("entry_id")
@click.option("--from", "scan_file", type=GivenPath(path_type=Path, dir_okay=False), required=True,
              help="A saved scan: the output of `kvdiag scan --format json`, or the scan's run.json.")
@click.option("--repo", help="The repository of the scanned tree (default: upstream llama.cpp or ggml, by the "
                             "build's layout); a fork's URL for a fork.")
@click.option("--tree", help="What the tree is, in words (e.g. 'BeeLlama fork').")
@click.option("--commit", help="The tree's commit, when the scan did not record it.")
@click.option("--date", "measured", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="When the scan ran (default: today).")
@click.option("--dry-run", is_flag=True, help="Print the table; write nothing.")
@click.pass_obj
def registry_radius(ctx, entry_id: str, scan_file: Path, repo: str | None, tree: str | None, commit: str | None,
                    measured, dry_run: bool) -> int:
    """Write a scan's measured radius into the entry as a [[radius]] table.

    The table names the kernel instantiations the findings were in, the kernels that
    launched clean, the case regexes that select every affected case, and the tree,
    commit, date and kvdiag version of the scan. A table of the same commit is replaced;
    nothing else in the file changes. `kvdiag scan ENTRY` without --params then scans it.
    """
    from kvdiag.engine.scan.radius import measure_radius

    entry = ctx.registry.get(entry_id)
    data = read_json(scan_file, "saved scan")     # bounded, as every file kvdiag reads back (kvdiag.fileio)
    dims = entry.scan.dimensions if entry.scan else ()
    try:
        table = measure_radius(data, dimensions=dims, repo=repo, tree=tree, commit=commit,
                               measured=measured.date() if measured else dt.date.today())
    except DataError as exc:
        raise DataError(f"{scan_file}: {exc}") from None
    if dry_run:
        click.echo(table_text(table), nl=False)
        return 0
    text = entry.path.read_text(encoding="utf-8")
    try:
        new = write_radius(text, table)
    except RadiusWriteError as exc:
        raise UsageError(f"{entry.path.name}: {exc}") from None
    problems = _lint_text(entry.path, new)
    if problems:
        for problem in problems:
            click.echo(problem)
        click.echo(f"kvdiag: {entry.path.name} not written: the radius would not lint", err=True)
        return int(ExitCode.DATA)
    written = write_atomic(entry.path, new)
    click.echo(table_text(table), nl=False)
    click.echo(f"kvdiag: wrote the radius of {table['commit'][:12]} into {written_as(entry.path, written)}", err=True)
    return 0
