"""Scratch git worktrees of the user's source, where probes are applied.

kvdiag never edits the user's working tree, index or branches: it adds a
*detached* worktree (``git worktree add --detach <scratch> <commit>``), works
there, and removes it (``git worktree remove --force``, then ``git worktree
prune``) when done — on success, on failure, and on Ctrl-C — unless asked to
keep it. The only trace in the user's repository while it exists is git's own
bookkeeping under ``.git/worktrees/``, which the removal deletes.

Every git command goes through :func:`kvdiag.proc.runner.run_command`.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from kvdiag.fileio import load_json_file, write_json
from kvdiag.proc.groups import sigint_deferred
from kvdiag.errors import HarnessError, WorktreeError
from kvdiag.probes.patch import Probe
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, CommandResult, run_command

GIT_TIMEOUT_S = 120.0
RECORD_FILE = ".kvdiag-probes.json"
GGML_SUBDIR = "ggml"
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
_LOG_NUMBERS = itertools.count(1)   # one sequence per process: log names never collide


@dataclass(frozen=True)
class ApplyResult:
    """One ``git apply`` of one probe: whether it applied, and git's own error lines."""

    probe: Probe
    ok: bool
    mode: str                       # "check" | "apply" | "revert" | "revert-check"
    directory: str | None           # the --directory= given to git apply, if any
    errors: tuple[str, ...] = ()    # git's "error: ..." lines
    output: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"{self.probe.name}: {self.mode} ok" + (f" (--directory={self.directory})" if self.directory else "")
        return f"{self.probe.name}: {self.mode} failed: " + ("; ".join(self.errors) or self.output.strip()[-300:])


class Git:
    """git commands against one directory, logged under ``log_dir`` with unique names."""

    def __init__(self, directory: Path, log_dir: Path, prefix: str = "git"):
        self.directory = Path(directory)
        self.log_dir = Path(log_dir)
        self.prefix = prefix

    def run(self, *args: str, timeout: float = GIT_TIMEOUT_S, name: str | None = None,
            env: dict[str, str] | None = None, on_output=None) -> CommandResult:
        """Run git; Ctrl-C while it runs is a KeyboardInterrupt (after the runner stopped it)."""
        label = f"{self.prefix}-{next(_LOG_NUMBERS):03d}-{name or args[0]}"
        try:
            return run_command(["git", "-C", str(self.directory), *args], timeout=timeout, log_dir=self.log_dir,
                               name=label, env_overrides={**_GIT_ENV, **(env or {})}, on_output=on_output)
        except CommandNotFound as exc:
            raise HarnessError(f"git is needed for probes and worktrees: {exc}") from None
        except CommandInterrupted:
            raise KeyboardInterrupt from None

    def out(self, *args: str, name: str | None = None) -> str:
        """stdout of a git command that must succeed; HarnessError with git's message otherwise."""
        result = self.run(*args, name=name)
        if not result.ok:
            raise WorktreeError(f"git {' '.join(args)} failed in {self.directory}: {_git_message(result)}")
        return result.stdout_text().strip()


def _git_message(result: CommandResult) -> str:
    lines = [ln.strip() for ln in result.combined_text().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return "; ".join(errors or lines[-3:]) or result.describe()


def error_lines(text: str) -> tuple[str, ...]:
    """git apply's own ``error: ...`` lines, in order."""
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:"))


def repo_toplevel(source: Path, log_dir: Path) -> Path:
    """The top of the git work tree holding ``source``; WorktreeError when it is not one."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise WorktreeError(f"source folder does not exist: {source}")
    result = Git(source, log_dir, "git-src").run("rev-parse", "--show-toplevel", name="toplevel")
    if not result.ok:
        raise WorktreeError(f"{source} is not a git checkout: {_git_message(result)}")
    return Path(result.stdout_text().strip())


def resolve_commit(source: Path, rev: str, log_dir: Path) -> str:
    """The full commit id of ``rev`` in ``source``; WorktreeError naming the rev when unknown."""
    result = Git(source, log_dir, "git-src").run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}",
                                                 name="rev-parse")
    if not result.ok or not result.stdout_text().strip():
        raise WorktreeError(f"{rev!r} is not a commit of {source}")
    return result.stdout_text().strip()


def porcelain_status(source: Path, log_dir: Path) -> str:
    """``git status --porcelain`` of the user's tree (what must not change)."""
    return Git(source, log_dir, "git-src").out("status", "--porcelain", name="status")


def apply_directory(worktree: Path, probe: Probe) -> str | None:
    """The ``--directory=`` a probe needs in this tree, or None.

    A ggml-only repository has ``src/ggml-cuda/…`` at its top; a llama.cpp tree
    keeps ggml under ``ggml/``. The diff's own paths decide: the layout in which
    the files it modifies exist; failing that, where its path prefix exists.
    """
    existing = [p for p, is_new in probe.touched_files() if not is_new]
    if existing:
        if all((worktree / p).exists() for p in existing):
            return None
        if all((worktree / GGML_SUBDIR / p).exists() for p in existing):
            return GGML_SUBDIR
    prefix = probe.prefix
    if prefix and not (worktree / prefix).exists() and (worktree / GGML_SUBDIR / prefix).exists():
        return GGML_SUBDIR
    return None


@dataclass
class Worktree:
    """A scratch worktree of ``source`` at ``commit``, detached. Use :func:`scratch_worktree`."""

    path: Path
    source: Path
    commit: str
    log_dir: Path
    applied: list[str] = field(default_factory=list)
    git: Git = field(init=False)

    def __post_init__(self) -> None:
        self.git = Git(self.path, self.log_dir, "git-wt")

    def apply(self, probe: Probe, *, check: bool = False, reverse: bool = False) -> ApplyResult:
        """``git apply [--check] [-R] [--directory=…] <probe file>`` in the worktree."""
        directory = apply_directory(self.path, probe)
        args = ["apply", "--whitespace=nowarn"]
        if check:
            args.append("--check")
        if reverse:
            args.append("-R")
        if directory:
            args.append(f"--directory={directory}")
        args.append(str(probe.path.resolve()))
        mode = ("revert-check" if check else "revert") if reverse else ("check" if check else "apply")
        result = self.git.run(*args, name=f"apply-{mode}")
        text = result.combined_text()
        ok = result.ok
        if ok and not check:
            if reverse:
                if probe.name in self.applied:
                    self.applied.remove(probe.name)
            else:
                self.applied.append(probe.name)
        return ApplyResult(probe=probe, ok=ok, mode=mode, directory=directory,
                           errors=error_lines(text) if not ok else (), output=text)

    def check(self, probe: Probe) -> ApplyResult:
        return self.apply(probe, check=True)

    def revert(self, probe: Probe) -> ApplyResult:
        return self.apply(probe, reverse=True)

    def reset(self) -> None:
        """Back to the pristine commit (only ever in kvdiag's own scratch worktree)."""
        self.git.out("reset", "--quiet", "--hard", self.commit, name="reset")
        self.git.out("clean", "-fdq", "-e", RECORD_FILE, name="clean")
        self.applied.clear()

    def head(self) -> str:
        return self.git.out("rev-parse", "HEAD", name="head")

    def write_record(self, extra: dict | None = None) -> Path:
        """``<worktree>/.kvdiag-probes.json``: what kvdiag made here, for revert and drop."""
        data = {"kvdiag": "probe worktree", "source": str(self.source), "commit": self.commit,
                "applied": list(self.applied), **(extra or {})}
        path = self.path / RECORD_FILE
        write_json(path, data)
        return path


def read_record(worktree: Path) -> dict:
    """The record of a worktree kvdiag made; WorktreeError when there is none (not ours)."""
    path = Path(worktree) / RECORD_FILE
    try:
        data = load_json_file(path)
    except FileNotFoundError:
        raise WorktreeError(f"{worktree} is not a worktree made by `kvdiag probe apply` (no {RECORD_FILE})") from None
    except (OSError, ValueError) as exc:
        raise WorktreeError(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("kvdiag") != "probe worktree" or "source" not in data:
        raise WorktreeError(f"{path} is not a kvdiag worktree record")
    return data


def add_worktree(source: Path, commit: str, path: Path, log_dir: Path) -> Worktree:
    """``git worktree add --detach path commit`` (path absent or empty); WorktreeError otherwise."""
    top = repo_toplevel(source, log_dir)
    sha = resolve_commit(top, commit, log_dir)
    path = Path(path).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorktreeError(f"{path} already exists and is not an empty folder")
    result = Git(top, log_dir, "git-src").run("worktree", "add", "--detach", str(path), sha, name="worktree-add")
    if not result.ok:
        raise WorktreeError(f"cannot add a worktree of {top} at {path}: {_git_message(result)}")
    return Worktree(path=path, source=top, commit=sha, log_dir=log_dir)


def remove_worktree(source: Path, path: Path, log_dir: Path) -> list[str]:
    """``git worktree remove --force`` then ``git worktree prune``; returns problems (never raises)."""
    with _sigint_deferred():
        return _remove_now(source, path, log_dir)


def _remove_now(source: Path, path: Path, log_dir: Path) -> list[str]:
    problems: list[str] = []
    git = Git(source, log_dir, "git-src")
    try:
        if Path(path).exists():
            result = git.run("worktree", "remove", "--force", "--force", str(path), name="worktree-remove")
            if not result.ok:
                problems.append(f"git worktree remove: {_git_message(result)}")
                shutil.rmtree(path, ignore_errors=True)
        prune = git.run("worktree", "prune", name="worktree-prune")
        if not prune.ok:
            problems.append(f"git worktree prune: {_git_message(prune)}")
    except (HarnessError, KeyboardInterrupt) as exc:
        problems.append(str(exc) or "interrupted")
    return problems


@contextmanager
def scratch_worktree(source: Path, commit: str = "HEAD", *, log_dir: Path, path: Path | None = None,
                     keep: bool = False) -> Iterator[Worktree]:
    """A detached worktree of ``source`` at ``commit``, removed on exit unless ``keep``.

    ``path`` defaults to a new temporary folder. Removal runs on success, on any
    exception and on Ctrl-C (KeyboardInterrupt); a second Ctrl-C during the
    removal is deferred until it is done.
    """
    parent: Path | None = None
    if path is None:
        parent = Path(tempfile.mkdtemp(prefix="kvdiag-wt-"))
        path = parent / "src"
    try:
        worktree = add_worktree(source, commit, path, log_dir)
    except BaseException:
        if parent is not None:
            shutil.rmtree(parent, ignore_errors=True)
        raise
    try:
        yield worktree
    finally:
        if not keep:
            with _sigint_deferred():
                _remove_now(worktree.source, worktree.path, log_dir)
                if parent is not None:
                    shutil.rmtree(parent, ignore_errors=True)


def apply_stack(worktree: Worktree, probes: Sequence[Probe]) -> ApplyResult | None:
    """Apply ``probes`` in order; the first failure's result (after checking it), or None when all applied."""
    for probe in probes:
        checked = worktree.check(probe)
        if not checked.ok:
            return checked
        applied = worktree.apply(probe)
        if not applied.ok:
            return applied
    return None


@contextmanager
def _sigint_deferred() -> Iterator[list[int]]:
    """While a worktree is being removed, a Ctrl-C is noted and re-raised after, not mid-removal."""
    with sigint_deferred() as got:
        yield got
    if got and sys.exc_info()[0] is None:
        raise KeyboardInterrupt
