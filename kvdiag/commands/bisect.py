"""``kvdiag bisect`` (cause or fix) and the hidden ``bisect-step`` that ``git bisect run`` calls.

Registered in kvdiag/cli.py with ``cli.add_command``. ``bisect-step`` answers in
git's convention (0 the old term, 1 the new term, 125 skip) and never raises. It
also runs without the main CLI as ``python -m kvdiag.commands.bisect bisect-step …``,
which is how ``kvdiag bisect`` calls it.

The ends are named by age, never by verdict: ``--old`` is the ancestor, ``--new``
the descendant, in both directions. ``--good``/``--bad`` are git's cause-direction
words for the same two (good = old, bad = new) and are refused with ``--fix``,
where the defect is present at the *old* end and "good" would name the newer one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import click

from kvdiag.commands.options import Count, GivenPath, Seconds
from kvdiag.commands.probes import _inspect, _recipe, _registry
from kvdiag.errors import UsageError
from kvdiag.exitcodes import ExitCode

ENDS_HELP = ("--good/--bad are git's words for a cause bisection (good: the older end, without the defect; bad: "
             "the newer end, with it). A fix bisection has the defect at its older end: name its ends --old "
             "(confirmed there) and --new (not reproduced there).")


def bisect_ends(fix: bool, old: str | None, new: str | None, good: str | None, bad: str | None) -> tuple[str, str]:
    """(old, new) from the options given; UsageError for a mixture or a missing end."""
    if fix and (good or bad):
        raise UsageError(f"--fix takes --old and --new, not --good/--bad: {ENDS_HELP}")
    if (old and good) or (new and bad):
        raise UsageError("give each end once: --old or --good for the older, --new or --bad for the newer")
    old, new = old or good, new or bad
    if not old or not new:
        missing = [name for name, value in (("--old", old), ("--new", new)) if not value]
        raise UsageError(f"missing {' and '.join(missing)}: a bisection needs both ends (older and newer commit)")
    return old, new


def step_recipe(entry, step, configure_cmd, build_cmd, build_dir, jobs, launcher):
    """How each commit is built, or None when the entry's step compiles its own objects and no build was asked."""
    from kvdiag.engine.bisect.step import builds_nothing

    if configure_cmd is None and build_cmd is None and build_dir is None and builds_nothing(entry, step):
        return None
    return _recipe(entry, configure_cmd, build_cmd, _inspect(build_dir), jobs, launcher=launcher)


@click.command("bisect")
@click.argument("entry_id")
@click.option("--source", type=GivenPath(path_type=Path), required=True, help="The git checkout to bisect.")
@click.option("--cause/--fix", "cause", default=True, show_default=True,
              help="--cause: the first commit where the entry is confirmed (introduced it). --fix: the first "
                   "commit where it is not reproduced any more (fixed it).")
@click.option("--old", help="The older end (an ancestor of --new): not reproduced there (cause), confirmed (--fix).")
@click.option("--new", help="The newer end: confirmed there (cause), not reproduced (--fix).")
@click.option("--good", help="Cause direction, git's word for --old.")
@click.option("--bad", help="Cause direction, git's word for --new.")
@click.option("--first-parent", is_flag=True,
              help="Follow only first parents (git bisect --first-parent): on a fork's own line a merge of upstream "
                   "is one step, and the merged commits are never built.")
@click.option("--build-cmd", help="Build command at each commit; {source}, {build}, {jobs} substituted (no shell).")
@click.option("--configure-cmd", help="Configure command, run at each commit on the one build tree; {source} and "
                                      "{build} substituted.")
@click.option("--build", "build_dir", type=GivenPath(path_type=Path),
              help="Reuse this build's CMake configuration at each commit (instead of --configure-cmd).")
@click.option("-j", "--jobs", type=Count(1, 1024), help="Build jobs (default: the CPU count).")
@click.option("--launcher/--no-launcher", "use_launcher", default=True, show_default=True,
              help="Put ccache (or sccache) in front of the compilers of a cmake configure, when on PATH.")
@click.option("--step", help="The repro step (default: the entry's default).")
@click.option("--sanitizer", type=GivenPath(path_type=Path), help="compute-sanitizer to use.")
@click.option("--timeout", type=Seconds(10**7), default=24 * 3600, show_default=True,
              help="Seconds git bisect run may take (the two ends are judged before it).")
@click.option("--keep", is_flag=True, help="Keep the scratch worktree and build.")
@click.option("--resume", "resume", metavar="RUN_ID",
              help="Take the commits an earlier bisection of this entry (a run in this run store, copied from the "
                   "machine that ran it if need be) judged confirmed or not-reproduced, with the same configure and "
                   "build commands, repro step and GPU architecture, instead of building them again.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.pass_obj
def bisect_cmd(obj, entry_id, source, cause, old, new, good, bad, first_parent, build_cmd, configure_cmd, build_dir,
               jobs, use_launcher, step, sanitizer, timeout, keep, resume, fmt, quiet) -> int:
    """Find the commit that introduced a defect, or with --fix the one that fixed it.

    Both ends are judged first: a cause bisection needs the old end not
    reproduced and the new end confirmed, a fix bisection the reverse;
    otherwise it stops, naming the verdicts (an old end that does not hold
    stops it before the new end is built). Then `git bisect run` in a
    scratch worktree builds each commit in one build tree and runs the entry.
    A commit that does not build, or whose verdict is anything else, is
    skipped, never blamed; a step that dies before judging (git reads its exit
    1 as bad) makes the bisection name nothing and exit 70. An entry whose
    step compiles its own objects (D7) needs no build options. Exit 0 when a
    commit was found, 4 when the ends do not hold or skipped commits leave it
    ambiguous.

    A bisection too long for one machine's time continues with --resume RUN_ID:
    each commit taken from that run says so, and any other is built again.
    """
    from kvdiag.commands.progress import progress_display
    from kvdiag.engine.bisect.bisection import BisectRequest, run_bisect
    from kvdiag.home import kvdiag_home
    from kvdiag.records.bisect import Direction
    from kvdiag.report.bisect_text import render_bisect
    from kvdiag.workspace.kept_build import compiler_launcher

    old, new = bisect_ends(not cause, old, new, good, bad)
    registry = _registry(obj)
    entry = registry.get(entry_id)
    if build_dir is not None and not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    launcher = compiler_launcher() if use_launcher else None
    recipe = step_recipe(entry, step, configure_cmd, build_cmd, build_dir, jobs, launcher)
    request = BisectRequest(entry=entry, source=source, old=old, new=new,
                            direction=Direction.CAUSE if cause else Direction.FIX, recipe=recipe,
                            configure_cmd=configure_cmd, build_cmd=build_cmd,
                            reference_build=build_dir.absolute() if build_dir else None, jobs=jobs,
                            registry_dir=Path(registry.root).resolve(), step=step,
                            sanitizer=sanitizer.resolve() if sanitizer else None, timeout=float(timeout),
                            keep=keep, launcher=launcher if recipe is not None else None, first_parent=first_parent,
                            resume=resume)
    with progress_display(quiet or fmt != "text") as progress:
        report = run_bisect(request, home=kvdiag_home(), progress=progress)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        click.echo(render_bisect(report), nl=False)
    return report.exit_code


@click.command("bisect-step", hidden=True)
@click.argument("entry_id")
@click.option("--source", type=GivenPath(path_type=Path), required=True)
@click.option("--build-dir", type=GivenPath(path_type=Path), required=True)
@click.option("--record", type=GivenPath(path_type=Path))
@click.option("--direction", type=click.Choice(["cause", "fix"]), default="cause")
@click.option("--configure-cmd")
@click.option("--build-cmd")
@click.option("--build", "reference_dir", type=GivenPath(path_type=Path))
@click.option("-j", "--jobs", type=Count(1, 1024))
@click.option("--registry", "registry_dir", type=GivenPath(path_type=Path))
@click.option("--step")
@click.option("--sanitizer", type=GivenPath(path_type=Path))
@click.option("--launcher")
@click.option("--resume-file", type=GivenPath(path_type=Path))
@click.pass_obj
def bisect_step_cmd(obj, entry_id, source, build_dir, record, direction, configure_cmd, build_cmd, reference_dir,
                    jobs, registry_dir, step, sanitizer, launcher, resume_file) -> int:
    """One step of `git bisect run`: build this commit, run the entry; exit 0 old term, 1 new term, 125 skip."""
    from kvdiag.commands.progress import progress_display
    from kvdiag.engine.bisect.resume import read_resumed
    from kvdiag.engine.bisect.step import append_step, bisect_step
    from kvdiag.home import kvdiag_home
    from kvdiag.records.bisect import SKIP, Direction, StepRecord

    try:
        if registry_dir is not None:
            from kvdiag.registry.loader import load_registry

            registry = load_registry(registry_dir)
        else:
            registry = _registry(obj)
        entry = registry.get(entry_id)
        recipe = step_recipe(entry, step, configure_cmd, build_cmd, reference_dir, jobs, launcher)
    except Exception as exc:  # noqa: BLE001 - git bisect run must get 125, not a traceback
        click.echo(f"kvdiag bisect-step: {exc}", err=True)
        if record is not None:
            append_step(record, StepRecord("unknown", "error", str(exc), SKIP))
        return SKIP
    how = Direction(direction)
    with progress_display(tty=False, plain_interval=float("inf")) as progress:   # lines into git bisect run's log
        outcome = bisect_step(entry, source=source, build_dir=build_dir, recipe=recipe, home=kvdiag_home(),
                              record=record, step=step, sanitizer=sanitizer, progress=progress, direction=how,
                              resumed=read_resumed(resume_file))
    click.echo(f"kvdiag bisect-step: {outcome.commit[:12]} {outcome.verdict} ({how.term_of(outcome.exit)}) in "
               f"{outcome.duration_s:.1f} s", err=True)
    return outcome.exit


COMMANDS = (bisect_cmd, bisect_step_cmd)


def _standalone(argv: Sequence[str] | None = None) -> int:
    """``python -m kvdiag.commands.bisect bisect-step …`` without the main CLI.

    As a program it owns its process the way `kvdiag` does (kvdiag.commands.exits): when
    `kvdiag bisect` is stopped, git's process group (this step among it) gets SIGTERM; the
    step then ends its build or run, closes its run folders as interrupted and ends its
    descendants, instead of dying with a run.json that says "running"."""
    from kvdiag.commands.exits import finish
    from kvdiag.proc import signals

    own_process = argv is None
    if own_process:
        signals.install()
    group = click.Group("kvdiag", commands={c.name: c for c in COMMANDS})
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = group.main(args=args, prog_name="kvdiag", standalone_mode=False)
        code = int(result) if isinstance(result, int) else 0
    except click.ClickException as exc:
        exc.show()
        code = 125 if args[:1] == ["bisect-step"] else int(ExitCode.USAGE)
    except (KeyboardInterrupt, click.exceptions.Abort):
        code = int(ExitCode.INTERRUPTED)
    return finish(code, "", own_process)


if __name__ == "__main__":
    sys.exit(_standalone())
