"""Bisection: which commit introduced a defect, driven by ``git bisect run``.

``kvdiag bisect D2 --source SRC --good A --bad B --build-cmd '…'`` makes a
scratch worktree of SRC (the user's tree, index and branches are never
touched: bisect state is per worktree), runs ``git bisect start B A`` there and
``git bisect run`` with kvdiag's own step command. Each step configures and
builds the commit git checked out, runs the entry, and exits with git's
convention: 0 good (not-reproduced), 1 bad (confirmed), 125 skip (a build that
fails, skipped, not-applicable, inconclusive, or kvdiag's own error) — so a
commit that does not build is skipped, never blamed. Each step appends its
verdict to ``bisect-steps.json`` in the bisect's run directory, which is how
the evidence at the first bad commit and at its parent is shown without
re-running anything. ``git bisect reset`` and the worktree's removal follow,
on success, failure and Ctrl-C.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from kvdiag import resources
from kvdiag.engine.execute import RunInterrupted, RunOptions, run_entry
from kvdiag.engine.gates import controls_gate_provider
from kvdiag.engine.scratch_build import BuildFailed, BuildRecipe, build_tree
from kvdiag.engine.target import prepare_target
from kvdiag.engine.verdict import Verdict
from kvdiag.errors import HarnessError, UsageError
from kvdiag.fileio import load_json_file, write_atomic
from kvdiag.exitcodes import ExitCode
from kvdiag.probes.worktree import Git, porcelain_status, repo_toplevel, resolve_commit, scratch_worktree
from kvdiag.proc.runner import CommandInterrupted
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord, target_record
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir, RunStore, write_json_atomic

GOOD, BAD, SKIP = 0, 1, 125
BISECT_TIMEOUT_S = 24 * 3600.0
STEPS_FILE = "bisect-steps.json"
STEP_MODULE = "kvdiag.commands.probes"   # `python -m kvdiag.commands.probes bisect-step …`
_FIRST_BAD = re.compile(r"^(?P<sha>[0-9a-f]{7,40}) is the first bad commit\s*$", re.M)
_ONLY_SKIPPED = re.compile(r"only 'skip'ped commits left to test", re.I)
_SHA_LINE = re.compile(r"^(?P<sha>[0-9a-f]{40})\b", re.M)


def verdict_to_bisect(verdict: Verdict) -> int:
    """git bisect run's convention: 0 good, 1 bad, 125 skip."""
    if verdict is Verdict.NOT_REPRODUCED:
        return GOOD
    if verdict is Verdict.CONFIRMED:
        return BAD
    return SKIP


# --------------------------------------------------------------------------- one step


@dataclass(frozen=True)
class StepRecord:
    """What one ``bisect-step`` found at one commit (one element of bisect-steps.json)."""

    commit: str
    verdict: str            # a Verdict value, or "build-failed" / "error"
    reason: str
    exit: int               # what the step told git: 0, 1 or 125
    run_dir: str | None = None
    duration_s: float = 0.0
    build_log: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "verdict": self.verdict, "reason": self.reason, "exit": self.exit,
                "run_dir": self.run_dir, "duration_s": round(self.duration_s, 3), "build_log": self.build_log}


def read_steps(path: Path) -> list[dict[str, Any]]:
    try:
        data = load_json_file(path)
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def append_step(path: Path, record: StepRecord) -> None:
    steps = read_steps(path)
    steps.append(record.to_dict())
    write_json_atomic(Path(path), steps)


def bisect_step(entry: Entry, *, source: Path, build_dir: Path, recipe: BuildRecipe, home: Path,
                record: Path | None = None, step: str | None = None, sanitizer: Path | None = None,
                progress: Progress | None = None) -> int:
    """Build the commit checked out in ``source``, run the entry, return 0/1/125. Never raises.

    Ctrl-C is re-raised (git bisect run then stops): it is not a verdict about the commit.
    """
    progress = progress or Progress()
    started = time.monotonic()
    store = RunStore(home)
    commit = "unknown"
    step_dir: RunDir | None = None
    outcome_record: StepRecord
    try:
        step_dir = store.create(f"{entry.id}-bisect-step",
                                RunRecord(entry=f"{entry.id}-bisect-step", status="running", kind="bisect-step"))
        logs = step_dir.logs
        commit = Git(source, logs, "git-step").out("rev-parse", "HEAD", name="head")
        try:
            build_tree(recipe, Path(source), Path(build_dir), log_dir=logs, label="bisect", progress=progress)
        except BuildFailed as exc:
            last = exc.tail[-1] if exc.tail else ""
            outcome_record = StepRecord(commit, "build-failed", f"{exc}" + (f": {last}" if last else ""), SKIP,
                                        None, time.monotonic() - started, str(exc.log) if exc.log else None)
        else:
            setup = store.create("target")
            target = prepare_target(Path(build_dir), log_dir=setup.logs, sanitizer=sanitizer, check_staleness=False)
            setup.write_record(target_record(target.to_dict()))
            run_dir = store.create(entry.id)
            try:
                outcome = run_entry(entry, target, run_dir, options=RunOptions(step=step, progress=progress),
                                    gate_provider=controls_gate_provider(home, target, setup.logs))
            except RunInterrupted:
                raise KeyboardInterrupt from None
            outcome_record = StepRecord(commit, outcome.verdict.value, outcome.reason,
                                        verdict_to_bisect(outcome.verdict), str(run_dir.path),
                                        time.monotonic() - started)
    except (KeyboardInterrupt, CommandInterrupted):
        raise KeyboardInterrupt from None
    except Exception as exc:  # noqa: BLE001 - any failure of kvdiag is a skip for git, recorded with its reason
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        outcome_record = StepRecord(commit, "error", detail, SKIP, None, time.monotonic() - started)
    try:
        if record is not None:
            append_step(record, outcome_record)
        if step_dir is not None:
            step_dir.write_record(RunRecord(entry=f"{entry.id}-bisect-step", status="finished", kind="bisect-step",
                                            fields={"step": outcome_record.to_dict()}))
    except OSError:
        pass
    return outcome_record.exit


# --------------------------------------------------------------------------- the bisection


@dataclass(frozen=True)
class CommitEvidence:
    commit: str
    subject: str
    verdict: str | None       # None: not tested in this bisection
    reason: str
    run_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "subject": self.subject, "verdict": self.verdict, "reason": self.reason,
                "run_dir": self.run_dir}


@dataclass(frozen=True)
class BisectReport:
    entry_id: str
    good: str
    bad: str
    first_bad: CommitEvidence | None
    parent: CommitEvidence | None
    candidates: tuple[str, ...]            # when only skipped commits are left: any of these
    steps: tuple[dict[str, Any], ...]
    message: str
    run_dir: Path
    bisect_log: str = ""
    status_unchanged: bool = True

    @property
    def exit_code(self) -> int:
        if not self.status_unchanged:
            return int(ExitCode.HARNESS)
        return int(ExitCode.OK) if self.first_bad is not None else int(ExitCode.INCONCLUSIVE)

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry_id, "good": self.good, "bad": self.bad,
                "first_bad": self.first_bad.to_dict() if self.first_bad else None,
                "parent": self.parent.to_dict() if self.parent else None, "candidates": list(self.candidates),
                "steps": list(self.steps), "message": self.message, "run_dir": str(self.run_dir),
                "source_status_unchanged": self.status_unchanged, "exit_code": self.exit_code}


@dataclass(frozen=True)
class BisectRequest:
    entry: Entry
    source: Path
    good: str
    bad: str
    configure_cmd: str | None = None
    build_cmd: str | None = None
    reference_build: Path | None = None
    jobs: int | None = None
    registry_dir: Path | None = None
    step: str | None = None
    sanitizer: Path | None = None
    timeout: float = BISECT_TIMEOUT_S
    keep: bool = False


def step_argv(request: BisectRequest, worktree: Path, build_dir: Path, record: Path) -> list[str]:
    """The command ``git bisect run`` runs at each commit (a list: git quotes each element)."""
    argv = [sys.executable, "-m", STEP_MODULE, "bisect-step", request.entry.id, "--source", str(worktree),
            "--build-dir", str(build_dir), "--record", str(record)]
    if request.configure_cmd is not None:
        argv += ["--configure-cmd", request.configure_cmd]
    if request.build_cmd is not None:
        argv += ["--build-cmd", request.build_cmd]
    if request.reference_build is not None:
        argv += ["--build", str(request.reference_build)]
    if request.jobs is not None:
        argv += ["--jobs", str(request.jobs)]
    if request.registry_dir is not None:
        argv += ["--registry", str(request.registry_dir)]
    if request.step is not None:
        argv += ["--step", request.step]
    if request.sanitizer is not None:
        argv += ["--sanitizer", str(request.sanitizer)]
    return argv


def run_bisect(request: BisectRequest, *, home: Path, progress: Progress | None = None) -> BisectReport:
    """Bisect in a scratch worktree; ``git bisect reset`` and its removal always follow."""
    progress = progress or Progress()
    entry = request.entry
    store = RunStore(home)
    running = RunRecord(entry=f"{entry.id}-bisect", status="running", kind="bisect",
                        fields={"good": request.good, "bad": request.bad, "source": str(request.source)})
    run_dir = store.create(f"{entry.id}-bisect", running)
    logs = run_dir.logs
    source = repo_toplevel(request.source, logs)
    good = resolve_commit(source, request.good, logs)
    bad = resolve_commit(source, request.bad, logs)
    if good == bad:
        raise UsageError("--good and --bad are the same commit")
    status_before = porcelain_status(source, logs)
    record = run_dir.path / STEPS_FILE
    write_json_atomic(record, [])
    scratch_root = Path(tempfile.mkdtemp(prefix=f"kvdiag-bisect-{entry.id}-"))
    try:
        with scratch_worktree(source, bad, log_dir=logs, path=scratch_root / "src", keep=request.keep) as wt:
            output, bisect_log = _drive(request, wt.git, wt.path, scratch_root / "build", record, good, bad,
                                        progress)
            first_bad, parent, candidates, message = _interpret(output, wt.git, record, good)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        run_dir.write_record(running.with_status(status, error=f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if not request.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    status_after = porcelain_status(source, logs)
    write_atomic(run_dir.path / "bisect-log.txt", bisect_log)
    report = BisectReport(entry.id, good, bad, first_bad, parent, candidates, tuple(read_steps(record)), message,
                          run_dir.path, bisect_log, status_before == status_after)
    run_dir.write_record(running.with_status("finished", bisect=report.to_dict()))
    return report


def _drive(request: BisectRequest, git: Git, worktree: Path, build_dir: Path, record: Path, good: str, bad: str,
           progress: Progress) -> tuple[str, str]:
    """``git bisect start``, ``git bisect run`` (its output), ``git bisect log``; always ``git bisect reset``."""
    start = git.run("bisect", "start", bad, good, name="bisect-start")
    if not start.ok:
        raise UsageError(f"git bisect start {bad[:12]} {good[:12]} failed: {_last_lines(start.combined_text())}")
    try:
        progress.say(f"bisecting {good[:12]}..{bad[:12]} in {worktree}")
        pythonpath = os.pathsep.join(p for p in (str(resources.import_root()), os.environ.get("PYTHONPATH")) if p)
        estimate = _BISECTING.search(start.combined_text())
        progress.begin("bisect steps", int(estimate.group("steps")) + 1 if estimate else None)
        progress.start(f"git bisect run {good[:12]}..{bad[:12]}", budget_s=request.timeout)
        try:
            run = git.run("bisect", "run", *step_argv(request, worktree, build_dir, record), timeout=request.timeout,
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


_BISECTING = re.compile(r"Bisecting: \d+ revisions? left to test after this \(roughly (?P<steps>\d+) steps?\)")


def _step_counter(progress: Progress):
    """on_output of `git bisect run`: each commit it judged is one step of the bisection."""
    def on_output(stream: str, line: str) -> None:
        if _BISECTING.search(line) or _FIRST_BAD.search(line):
            progress.advance(line.strip()[:60])
        else:
            progress.line(stream, line)
    return on_output


def _interpret(output: str, git: Git, record: Path, good: str):
    steps = read_steps(record)
    found = _FIRST_BAD.search(output)
    if found:
        sha = git.out("rev-parse", found.group("sha"), name="rev-parse-first-bad")
        first = _evidence(git, sha, steps, good)
        parents = git.out("rev-list", "--parents", "-n", "1", sha, name="parents").split()[1:]
        parent = _evidence(git, parents[0], steps, good) if parents else None
        return first, parent, (), f"{sha[:12]} is the first bad commit"
    if _ONLY_SKIPPED.search(output):
        tail = output[_ONLY_SKIPPED.search(output).end():]
        candidates = tuple(dict.fromkeys(m.group("sha") for m in _SHA_LINE.finditer(tail)))
        return None, None, candidates, ("only skipped commits are left: the first bad commit could be any of "
                                        f"{len(candidates)} commit(s)")
    return None, None, (), f"git bisect run did not name a first bad commit: {_last_lines(output)}"


def _evidence(git: Git, sha: str, steps: Sequence[dict[str, Any]], good: str) -> CommitEvidence:
    subject = git.out("log", "-1", "--format=%s", sha, name="subject")
    tested = [s for s in steps if str(s.get("commit")) == sha]
    if tested:
        last = tested[-1]
        return CommitEvidence(sha, subject, str(last.get("verdict")), str(last.get("reason", "")),
                              last.get("run_dir"))
    why = "not tested in this bisection: it is the --good commit, taken as good" if sha == good else \
        "not tested in this bisection"
    return CommitEvidence(sha, subject, None, why)


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " / ".join(lines[-n:]) or "(no output)"
