"""Bisection in either direction: which commit introduced a defect, or which fixed it.

``kvdiag bisect D2 --source SRC --old A --new B`` (cause) or ``… --fix`` makes a
scratch worktree of SRC (the user's tree, index and branches are never touched:
bisect state is per worktree) and:

1. judges both ends first, in that worktree and the bisection's one build tree:
   a cause bisection needs OLD not-reproduced and NEW confirmed, a fix bisection
   OLD confirmed and NEW not-reproduced. Any other pair stops here, naming the
   verdicts: git would otherwise bisect a range that does not hold what it is
   told, and blame an innocent commit. An old end that does not hold stops it
   before the new end is built: no verdict there could make the range usable, and
   on a GPU project that build is the most expensive step (on the device, the
   fork's f7832345b failed to build in 47 s; the new end would have been a full
   build of about 450 s more, for nothing);
2. ``git bisect start`` with the direction's terms (good/bad, or broken/fixed)
   and the two ends as judged (``--first-parent`` with ``first_parent``: a fork's
   own line, where a merge of upstream is one step and the merged commits are not
   visited), then ``git bisect run`` with kvdiag's step
   command, which answers git's way: 0 the old term, 1 the new term, 125 skip.
   A commit that does not build, or whose verdict is neither of the two, is
   skipped, never blamed; when only skipped commits are left, git's list of
   them is the answer ("one of these");
3. ``git bisect log``, then ``git bisect reset`` and the worktree's removal, on
   success, failure and Ctrl-C.

Every step (the ends too) appends a `StepRecord` to ``bisect-steps.json`` in the
bisection's run folder: its commit, verdict, what git was told, and the seconds of
its configure, build and run. The commit found and its parent are shown with
their own steps' evidence, read back from that file, not re-run.

``--resume RUN`` takes the steps an earlier bisection of the entry judged, under
the rules of :mod:`kvdiag.engine.bisect.resume`, instead of building them again:
ends and git's steps alike, each marked with the run it came from.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvdiag import resources
from kvdiag.engine.bisect.marks import unrecorded_marks, unrecorded_message
from kvdiag.engine.bisect.resume import RESUME_FILE, Resumed, load_resumed
from kvdiag.engine.bisect.step import append_step, bisect_step, read_steps
from kvdiag.workspace.scratch_build import BuildRecipe
from kvdiag.errors import HarnessError, UsageError
from kvdiag.fileio import write_atomic
from kvdiag.probes.worktree import Git, porcelain_status, repo_toplevel, resolve_commit, scratch_worktree
from kvdiag.progress import Progress
from kvdiag.records.bisect import (
    ROLE_NEW,
    ROLE_OLD,
    STEPS_FILE,
    BisectRecord,
    CommitEvidence,
    Direction,
    StepRecord,
)
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore, write_json_atomic

BISECT_TIMEOUT_S = 24 * 3600.0
STEP_MODULE = "kvdiag.commands.bisect"   # `python -m kvdiag.commands.bisect bisect-step …`
_FIRST = re.compile(r"^(?P<sha>[0-9a-f]{7,40}) is the first (?P<term>\w+) commit\s*$", re.M)
_ONLY_SKIPPED = re.compile(r"only 'skip'ped commits left to test", re.I)
_SHA_LINE = re.compile(r"^(?P<sha>[0-9a-f]{40})\b", re.M)
_BISECTING = re.compile(r"Bisecting: \d+ revisions? left to test after this \(roughly (?P<steps>\d+) steps?\)")


@dataclass(frozen=True)
class BisectRequest:
    entry: Entry
    source: Path
    old: str
    new: str
    direction: Direction = Direction.CAUSE
    recipe: BuildRecipe | None = None        # None: the entry's step compiles its own objects (no build)
    configure_cmd: str | None = None
    build_cmd: str | None = None
    reference_build: Path | None = None
    jobs: int | None = None
    registry_dir: Path | None = None
    step: str | None = None
    sanitizer: Path | None = None
    timeout: float = BISECT_TIMEOUT_S
    keep: bool = False
    launcher: str | None = None
    first_parent: bool = False               # follow only first parents: a merge is one commit, its side unvisited
    resume: str | None = None                # an earlier bisection's run id: take the steps it judged


def machine_gpu_archs(log_dir: Path) -> list[str]:
    """This machine's visible GPU architectures ("sm_90"), for --resume's check on a GPU entry."""
    from kvdiag.workspace.gpu import fingerprint_gpu

    return [d.arch for d in fingerprint_gpu(log_dir=log_dir).devices if d.arch]


def step_argv(request: BisectRequest, worktree: Path, build_dir: Path, record: Path,
              resumed: Path | None = None) -> list[str]:
    """The command ``git bisect run`` runs at each commit (a list: git quotes each element); ``resumed``: the
    bisection's resume.json, whose steps it takes instead of building."""
    argv = [sys.executable, "-m", STEP_MODULE, "bisect-step", request.entry.id, "--source", str(worktree),
            "--build-dir", str(build_dir), "--record", str(record), "--direction", request.direction.value]
    options = (("--configure-cmd", request.configure_cmd), ("--build-cmd", request.build_cmd),
               ("--build", request.reference_build), ("--jobs", request.jobs), ("--registry", request.registry_dir),
               ("--step", request.step), ("--sanitizer", request.sanitizer), ("--launcher", request.launcher),
               ("--resume-file", resumed))
    for flag, value in options:
        if value is not None:
            argv += [flag, str(value)]
    return argv


def run_bisect(request: BisectRequest, *, home: Path, progress: Progress | None = None) -> BisectRecord:
    """Judge the ends, then bisect between them, in a scratch worktree; ``git bisect reset`` and its removal
    always follow. UsageError for ends that are not commits of SOURCE, equal, or not OLD before NEW."""
    progress = progress or Progress()
    entry = request.entry
    running = RunRecord(entry=f"{entry.id}-bisect", status="running", kind="bisect",
                        fields={"direction": request.direction.value, "old": request.old, "new": request.new,
                                "source": str(request.source)})
    run_dir = RunStore(home).create(f"{entry.id}-bisect", running)
    logs = run_dir.logs
    source = repo_toplevel(request.source, logs)
    old, new = resolve_commit(source, request.old, logs), resolve_commit(source, request.new, logs)
    _check_range(Git(source, logs, "git-src"), old, new)
    resumed = None
    if request.resume:
        resumed = load_resumed(RunStore(home), request.resume, entry, request.recipe, request.step,
                               request.direction, lambda: machine_gpu_archs(logs))
        resumed.write(run_dir.path / RESUME_FILE)
        progress.say(resumed.summary())
    status_before = porcelain_status(source, logs)
    record = run_dir.path / STEPS_FILE
    write_json_atomic(record, [])
    scratch_root = Path(tempfile.mkdtemp(prefix=f"kvdiag-bisect-{entry.id}-"))
    try:
        with scratch_worktree(source, old, log_dir=logs, path=scratch_root / "src", keep=request.keep) as wt:
            result = _bisect_in(request, wt.git, wt.path, scratch_root / "build", record, old, new, home, progress,
                                resumed)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        run_dir.write_record(running.with_status(status, error=f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if not request.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    found, parent, candidates, message, bisect_log, verified = result
    write_atomic(run_dir.path / "bisect-log.txt", bisect_log)
    unrecorded = unrecorded_marks(bisect_log, read_steps(record), request.direction)
    if unrecorded:
        found, parent, candidates, message = None, None, (), unrecorded_message(unrecorded)
    report = BisectRecord(entry.id, request.direction, old, new, found, parent, candidates,
                          tuple(read_steps(record)), message, str(run_dir.path), verified,
                          status_before == porcelain_status(source, logs), str(source),
                          _repository(Git(source, logs, "git-src")), request.launcher, request.first_parent,
                          {"resumed_from": resumed.run_id} if resumed else {}, marks_recorded=not unrecorded)
    run_dir.write_record(running.with_status("finished", bisect=report.to_dict()))
    return report


def _check_range(git: Git, old: str, new: str) -> None:
    if old == new:
        raise UsageError("the old and new ends are the same commit")
    if not git.run("merge-base", "--is-ancestor", old, new, name="is-ancestor").ok:
        raise UsageError(f"the old end {old[:12]} is not an ancestor of the new end {new[:12]}: give the older "
                         "commit as --old (--good) and the newer as --new (--bad)")


def _bisect_in(request: BisectRequest, git: Git, worktree: Path, build_dir: Path, record: Path, old: str, new: str,
               home: Path, progress: Progress, resumed: Resumed | None = None):
    """The ends, then git's bisection: (found, parent, candidates, message, bisect log, ends verified)."""
    direction = request.direction
    ends = []
    for role, commit in ((ROLE_OLD, old), (ROLE_NEW, new)):
        taken = resumed.take(commit, role) if resumed else None
        if taken is not None:
            append_step(record, taken)
            ends.append(taken)
            progress.say(f"{role} {commit[:12]}: {taken.verdict}, taken from {taken.reused_from}: {taken.reason}")
        else:
            git.out("checkout", "--quiet", "--detach", commit, name=f"checkout-{role.split()[0]}")
            progress.say(f"{role} {commit[:12]}: building and running {request.entry.id}")
            ends.append(bisect_step(request.entry, source=worktree, build_dir=build_dir, recipe=request.recipe,
                                    home=home, record=record, step=request.step, sanitizer=request.sanitizer,
                                    progress=progress, direction=direction, role=role))
            progress.say(f"{role} {commit[:12]}: {ends[-1].verdict}: {ends[-1].reason}")
        if role == ROLE_OLD and ends[0].verdict != direction.old_verdict:
            return None, None, (), ends_problem(direction, ends[0], None, unjudged=new), "", False
    wrong = ends_problem(direction, ends[0], ends[1])
    if wrong:
        return None, None, (), wrong, "", False
    resume_file = record.parent / RESUME_FILE if resumed and resumed.steps else None
    output, bisect_log = _drive(request, git, worktree, build_dir, record, old, new, progress, resume_file)
    found, parent, candidates, message = _interpret(output, git, record, direction)
    return found, parent, candidates, message, bisect_log, True


def ends_problem(direction: Direction, old: StepRecord, new: StepRecord | None, unjudged: str = "") -> str | None:
    """Why the two ends cannot be bisected in this direction (None when they can). ``new`` None: the
    old end did not hold, and the new end (``unjudged``) was not built or run."""
    if new is not None and old.verdict == direction.old_verdict and new.verdict == direction.new_verdict:
        return None
    what = "a cause bisection" if direction is Direction.CAUSE else "a fix bisection"
    if new is None:
        return (f"the ends do not bracket a change: {what} needs the old end {direction.old_verdict} and the new end "
                f"{direction.new_verdict}, but the old end {old.commit[:12]} was {old.verdict} ({old.reason}); the "
                f"new end {unjudged[:12]} was not judged (no verdict there could make this range usable): "
                f"nothing was bisected; give another old end")
    return (f"the ends do not bracket a change: {what} needs the old end {direction.old_verdict} and the new end "
            f"{direction.new_verdict}, but the old end {old.commit[:12]} was {old.verdict} ({old.reason}) and the "
            f"new end {new.commit[:12]} was {new.verdict} ({new.reason}); nothing was bisected")


def _drive(request: BisectRequest, git: Git, worktree: Path, build_dir: Path, record: Path, old: str, new: str,
           progress: Progress, resume_file: Path | None = None) -> tuple[str, str]:
    """``git bisect start`` (both ends marked as judged), ``git bisect run`` (its output), ``git bisect log``;
    always ``git bisect reset``."""
    term_old, term_new = request.direction.terms
    terms = [] if request.direction is Direction.CAUSE else [f"--term-old={term_old}", f"--term-new={term_new}"]
    first = ["--first-parent"] if request.first_parent else []
    start = git.run("bisect", "start", *first, *terms, new, old, name="bisect-start")
    if not start.ok:
        raise UsageError(f"git bisect start {new[:12]} {old[:12]} failed: {_last_lines(start.combined_text())}")
    try:
        if _FIRST.search(start.combined_text()):     # nothing between the ends: git names the new end at once
            return start.combined_text(), git.run("bisect", "log", name="bisect-log").stdout_text()
        pythonpath = os.pathsep.join(p for p in (str(resources.import_root()), os.environ.get("PYTHONPATH")) if p)
        estimate = _BISECTING.search(start.combined_text())
        progress.begin("bisect steps", int(estimate.group("steps")) + 1 if estimate else None)
        progress.start(f"git bisect run {old[:12]}..{new[:12]}", budget_s=request.timeout)
        try:
            run = git.run("bisect", "run", *step_argv(request, worktree, build_dir, record, resume_file),
                          timeout=request.timeout,
                          name="bisect-run", env={"PYTHONPATH": pythonpath}, on_output=_step_counter(progress))
        finally:
            progress.stop()
            progress.end()
        if run.interrupted:
            raise KeyboardInterrupt
        if run.timed_out:
            raise HarnessError(f"git bisect run timed out after {request.timeout:g} s")
        log = git.run("bisect", "log", name="bisect-log")
        return run.combined_text(), log.stdout_text()
    finally:
        git.run("bisect", "reset", name="bisect-reset")


def _step_counter(progress: Progress):
    """on_output of `git bisect run`: each commit it judged is one step of the bisection."""
    def on_output(stream: str, line: str) -> None:
        if _BISECTING.search(line) or _FIRST.search(line):
            progress.advance(line.strip()[:60])
        elif line.startswith("kvdiag bisect-step: "):      # each step's verdict, as it lands
            progress.say(line.strip().removeprefix("kvdiag "))
        else:
            progress.line(stream, line)
    return on_output


def _interpret(output: str, git: Git, record: Path, direction: Direction):
    steps = read_steps(record)
    found = _FIRST.search(output)
    if found:
        sha = git.out("rev-parse", found.group("sha"), name="rev-parse-found")
        first = _evidence(git, sha, steps)
        parents = git.out("rev-list", "--parents", "-n", "1", sha, name="parents").split()[1:]
        parent = _evidence(git, parents[0], steps) if parents else None
        return first, parent, (), f"{sha[:12]} is the first {direction.terms[1]} commit ({direction.found_means})"
    skipped = _ONLY_SKIPPED.search(output)
    if skipped:
        tail = output[skipped.end():]
        candidates = tuple(dict.fromkeys(m.group("sha") for m in _SHA_LINE.finditer(tail)))
        return None, None, candidates, (f"only skipped commits are left: the first {direction.terms[1]} commit is "
                                        f"one of these {len(candidates)}")
    return None, None, (), f"git bisect run did not name a first {direction.terms[1]} commit: {_last_lines(output)}"


def _evidence(git: Git, sha: str, steps: Sequence[StepRecord]) -> CommitEvidence:
    subject = git.out("log", "-1", "--format=%s", sha, name="subject")
    tested = [s for s in steps if s.commit == sha]
    if tested:
        last = tested[-1]
        return CommitEvidence(sha, subject, last.verdict, last.reason, last.run_dir)
    return CommitEvidence(sha, subject, None, "not tested in this bisection")


def _repository(git: Git) -> str | None:
    """The source's origin URL when it is a URL (a local clone's path says nothing to a reader elsewhere)."""
    result = git.run("remote", "get-url", "origin", name="origin-url")
    url = result.stdout_text().strip() if result.ok else ""
    return url if re.match(r"^(\w+://|git@)", url) else None


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " / ".join(lines[-n:]) or "(no output)"


__all__ = ["BISECT_TIMEOUT_S", "BisectRequest", "STEPS_FILE", "append_step", "ends_problem", "run_bisect",
           "step_argv"]
