"""The git state of a build's source tree: commit, describe, branch, and what is uncommitted.

A verdict names the exact source it was made from; a dirty tree is reported with
its changed paths, because ggml globs ``*.cu`` and an untracked file is built.

Every question here leaves the user's ``.git`` as it was. ``git describe --dirty``
refreshes and rewrites ``.git/index`` even under ``GIT_OPTIONAL_LOCKS=0``, and
llama.cpp's CMake lists ``.git/index`` as a configure dependency of ``build.ninja``
(its build-info step): one inspection of a dirty tree made the user's build stale
(a CMake re-run on their next build) and D13 then confirmed on kvdiag's own doing
(seen on an H200, llama.cpp b9084, 2026-12-02). So the description is asked for
without ``--dirty``, and "dirty" comes from ``git status`` alone, which honours
``GIT_OPTIONAL_LOCKS=0`` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.parse.text import first_line
from kvdiag.proc.runner import CommandNotFound, run_command

GIT_TIMEOUT_S = 30.0
MAX_LISTED = 20                  # dirty paths kept in the record; dirty_count says how many in all
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


@dataclass(frozen=True)
class GitState:
    """The git state of a build's source directory."""

    commit: str
    short: str
    describe: str | None
    dirty: bool
    dirty_files: tuple[str, ...]  # porcelain lines' paths, at most MAX_LISTED
    branch: str | None  # None when HEAD is detached
    dirty_count: int = 0  # all changed/untracked paths, of which dirty_files lists the first ones

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "short": self.short,
            "describe": self.describe,
            "dirty": self.dirty,
            "dirty_files": list(self.dirty_files),
            "dirty_count": self.dirty_count,
            "branch": self.branch,
        }


def git_state(source_dir: Path, *, log_dir: Path, exclude: Path | None = None) -> GitState | None:
    """The git state of ``source_dir``, or None when it is not in a git work tree (or git is missing).

    ``exclude``: a directory (the build dir) whose untracked files do not make the tree dirty.
    Untracked files do count otherwise: ggml globs ``*.cu``, so a new file is built.
    """
    state, _ = git_state_or_why(source_dir, log_dir=log_dir, exclude=exclude)
    return state


def _git(args: Sequence[str], source_dir: Path, log_dir: Path, name: str):
    return run_command(
        ["git", "-C", str(source_dir), *args],
        timeout=GIT_TIMEOUT_S,
        log_dir=log_dir,
        name=name,
        env_overrides=_GIT_ENV,
    )


def git_state_or_why(source_dir: Path, *, log_dir: Path, exclude: Path | None) -> tuple[GitState | None, str | None]:
    if not source_dir.is_dir():
        return None, f"source dir {source_dir} does not exist here: no git state"
    try:
        head = _git(["rev-parse", "HEAD"], source_dir, log_dir, "git-rev-parse-head")
    except CommandNotFound as exc:
        return None, f"git not found: no git state ({exc})"
    if head.returncode != 0 or head.timed_out:
        why = first_line(head.combined_text()) or head.describe()
        return None, f"{source_dir} is not a git checkout with a commit: {why}"
    commit = head.stdout_text().strip()
    short_r = _git(["rev-parse", "--short", "HEAD"], source_dir, log_dir, "git-rev-parse-short")
    short = short_r.stdout_text().strip() if short_r.returncode == 0 else commit[:12]
    desc_r = _git(["describe", "--tags", "--always"], source_dir, log_dir, "git-describe")
    describe = (desc_r.stdout_text().strip() or None) if desc_r.returncode == 0 else None

    status_args = ["status", "--porcelain", "--untracked-files=normal"]
    if exclude is not None:
        try:
            rel = exclude.resolve().relative_to(source_dir.resolve())
        except ValueError:
            rel = None
        if rel is not None and rel.parts:
            status_args += ["--", ".", f":(exclude){rel.as_posix()}"]
    status_r = _git(status_args, source_dir, log_dir, "git-status")
    changed: list[str] = []
    tracked_changed = False
    if status_r.returncode == 0:
        for line in status_r.stdout_text().splitlines():
            if len(line) > 3:
                changed.append(line[3:])
                tracked_changed = tracked_changed or not line.startswith("??")
    else:       # not known to be clean: said so, never taken as clean
        changed.append(f"(git status failed: {first_line(status_r.combined_text()) or status_r.describe()})")
        tracked_changed = True
    dirty = bool(changed)
    if tracked_changed and describe is not None:
        describe += "-dirty"            # what `describe --dirty` prints (untracked files aside), without its write

    branch_r = _git(["symbolic-ref", "--short", "-q", "HEAD"], source_dir, log_dir, "git-branch")
    branch = (branch_r.stdout_text().strip() or None) if branch_r.returncode == 0 else None
    return (
        GitState(
            commit=commit,
            short=short,
            describe=describe,
            dirty=dirty,
            dirty_files=tuple(changed[:MAX_LISTED]),
            branch=branch,
            dirty_count=len(changed),
        ),
        None,
    )
