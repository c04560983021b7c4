"""The `kvdiag` command line. The only module that exits.

Every command raises library errors; `main` turns them into one line on stderr
and a documented exit code (see `kvdiag.exitcodes`). Tests call `main([...])`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import click
from tabulate import tabulate

from kvdiag import __version__
from kvdiag.errors import HarnessError, KvdiagError, RegistryError, UsageError
from kvdiag.exitcodes import EXIT_CODE_TABLE, ExitCode
from kvdiag.registry.loader import Registry, load_registry

EXIT_HELP = "\n".join(f"  {int(code):>3}  {text}" for code, text in EXIT_CODE_TABLE)


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


@click.group(epilog=f"Exit codes:\n\n{EXIT_HELP}", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvdiag")
@click.option("--registry", "registry_dir", type=click.Path(path_type=Path), default=None,
              envvar="KVDIAG_REGISTRY", help="Registry folder (default: the project's registry/).")
@click.pass_context
def cli(ctx: click.Context, registry_dir: Path | None) -> None:
    """Reproduce known CUDA defects of llama.cpp-family builds and give honest verdicts.

    \b
    Typical use:
      kvdiag list                          the known defects
      kvdiag show D2 --build BUILD         an entry, and the exact argv it would run
      kvdiag run D2 --build BUILD          one verdict, with the output that supports it
      kvdiag doctor                        prove the sanitizer tools work on this machine
    """
    ctx.obj = Context(registry_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the CLI and map every failure onto a documented exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="kvdiag", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Abort:
        click.echo("kvdiag: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("kvdiag: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except UsageError as exc:
        click.echo(f"kvdiag: {exc}", err=True)
        return int(ExitCode.USAGE)
    except RegistryError as exc:
        click.echo(f"kvdiag: {exc}", err=True)
        return int(ExitCode.DATA)
    except HarnessError as exc:
        click.echo(f"kvdiag: internal failure: {exc}", err=True)
        return int(ExitCode.HARNESS)
    except KvdiagError as exc:
        click.echo(f"kvdiag: {exc}", err=True)
        return int(ExitCode.HARNESS)
    return int(result) if isinstance(result, int) else 0


def _report_problems(registry: Registry) -> None:
    for problem in registry.problems:
        click.echo(f"kvdiag: registry problem: {problem}", err=True)


# --------------------------------------------------------------------------- registry browsing

@cli.command("list")
@click.option("--owner", help="Only entries of this owner.")
@click.option("--status", help="Only entries with this status.")
@click.option("--tool", help="Only entries using this sanitizer tool.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@pass_ctx
def list_cmd(ctx: Context, owner: str | None, status: str | None, tool: str | None, fmt: str) -> int:
    """The defects of the registry, one line each."""
    registry = ctx.registry
    entries = [e for e in registry.entries
               if (not owner or e.owner == owner) and (not status or e.status == status)
               and (not tool or tool in e.tools)]
    if fmt == "json":
        click.echo(json.dumps([{"id": e.id, "title": e.title, "owner": e.owner, "status": e.status,
                                "severity": e.severity, "tools": list(e.tools), "needs": list(e.needs())}
                               for e in entries], indent=2))
    else:
        rows = [(e.id, _clip(e.title, 58), e.owner, e.status, ",".join(e.tools) or "-", ", ".join(e.needs()) or "-")
                for e in entries]
        click.echo(tabulate(rows, headers=["id", "title", "owner", "status", "tools", "needs"]))
    _report_problems(registry)
    return int(ExitCode.DATA) if registry.problems else 0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@cli.group("registry")
def registry_group() -> None:
    """Check and export the registry."""


@registry_group.command("lint")
@pass_ctx
def registry_lint(ctx: Context) -> int:
    """Check every entry against the schema; prints every problem as file: key: message."""
    registry = ctx.registry
    for problem in registry.problems:
        click.echo(str(problem))
    if registry.problems:
        click.echo(f"{len(registry.problems)} problem(s) in {registry.root.name}/", err=True)
        return int(ExitCode.DATA)
    click.echo(f"{len(registry.entries)} entries, no problems")
    return 0


@registry_group.command("export")
@click.option("--format", "fmt", type=click.Choice(["osv"]), default="osv", show_default=True)
@click.argument("ids", nargs=-1)
@pass_ctx
def registry_export(ctx: Context, fmt: str, ids: tuple[str, ...]) -> int:
    """Export entries (all, or the IDS given) as OSV JSON."""
    from kvdiag.registry.osv import entry_to_osv

    registry = ctx.registry
    entries = [registry.get(i) for i in ids] if ids else list(registry.entries)
    click.echo(json.dumps([entry_to_osv(e) for e in entries], indent=2))
    return 0


@cli.command("show")
@click.argument("entry_id")
@click.option("--build", "build_dir", type=click.Path(path_type=Path), envvar="LLAMA_KV_BUILD",
              help="A build folder: also print the exact argv each step would run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@pass_ctx
def show_cmd(ctx: Context, entry_id: str, build_dir: Path | None, fmt: str) -> int:
    """One entry in full; with --build, the commands it would run against that build."""
    from kvdiag.report.entry_text import render_entry

    entry = ctx.registry.get(entry_id)
    plans = None
    if build_dir is not None:
        from kvdiag.engine.planning import plan_commands_for_display

        plans = plan_commands_for_display(entry, build_dir)
    if fmt == "json":
        out = {"id": entry.id, "front_matter": _jsonable(entry.raw), "body": entry.body}
        if plans is not None:
            out["commands"] = plans
        click.echo(json.dumps(out, indent=2, default=str))
    else:
        click.echo(render_entry(entry, plans))
    return 0


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
