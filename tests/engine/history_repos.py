"""Real git histories staged in a test, for the affected-range tests (a uniquely named helper module).

`Staged` makes commits, branches, merges and tags in a repository under the test's
tmp_path, and clones of it (complete, shallow, without .git). Set-up only: kvdiag's
own git questions go through its runner (kvdiag.workspace.history).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from isolation import isolate_git

LLAMA_URL = "https://github.com/ggml-org/llama.cpp"
GGML_URL = "https://github.com/ggml-org/ggml"
FORK_URL = "https://github.com/GenerelSchwerz/llama.cpp"


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git without the user's or the system's configuration, with an identity."""
    isolate_git(monkeypatch, tmp_path / "git-home")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


class Staged:
    """One repository of the test: ``commit`` returns the new commit's full id."""

    def __init__(self, path: Path, *, remote: str | None = None):
        self.path = path
        path.mkdir(parents=True)
        git(path, "-c", "init.defaultBranch=master", "init", "-q")
        if remote:
            git(path, "remote", "add", "origin", remote)
        self._n = 0

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        self._n += 1
        for rel, text in (files or {f"history/{self._n}.txt": f"{message}\n"}).items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git(self.path, "add", "-A")
        stamp = f"2026-01-01T00:{self._n // 60:02d}:{self._n % 60:02d}+00:00"   # dates increase with history
        env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        done = subprocess.run(["git", "-C", str(self.path), "commit", "-q", "-m", message], env=env,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return git(self.path, "rev-parse", "HEAD")

    def branch(self, name: str, at: str) -> None:
        git(self.path, "checkout", "-q", "-b", name, at)

    def checkout(self, rev: str) -> None:
        git(self.path, "checkout", "-q", rev)

    def merge(self, rev: str, message: str) -> str:
        git(self.path, "merge", "-q", "--no-ff", "-m", message, rev)
        return git(self.path, "rev-parse", "HEAD")

    def tag(self, name: str, rev: str = "HEAD") -> None:
        git(self.path, "tag", name, rev)

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    # ---------------------------------------------------------------- other trees of the same history

    def shallow_clone(self, dest: Path, *, branch: str, depth: int | None = 1, since: str | None = None,
                      checkout: str | None = None, origin: str | None = None) -> Path:
        """``git clone --depth N`` (or ``--shallow-since``) over file://, optionally re-pointing origin."""
        args = ["git", "clone", "-q", "--branch", branch]
        args += [f"--depth={depth}"] if since is None else [f"--shallow-since={since}"]
        subprocess.run([*args, f"file://{self.path}", str(dest)], check=True, capture_output=True)
        if checkout:
            git(dest, "checkout", "-q", checkout)
        if origin:
            git(dest, "remote", "set-url", "origin", origin)
        return dest

    def full_clone(self, dest: Path, *, branch: str = "master", single_branch: bool = False,
                   origin: str | None = None) -> Path:
        args = ["git", "clone", "-q", "--branch", branch] + (["--single-branch"] if single_branch else [])
        subprocess.run([*args, f"file://{self.path}", str(dest)], check=True, capture_output=True)
        if origin:
            git(dest, "remote", "set-url", "origin", origin)
        return dest

    def exported(self, dest: Path, rev: str = "HEAD") -> Path:
        """The tree at ``rev`` without .git (``git archive``), as a release tarball unpacks."""
        dest.mkdir(parents=True)
        archive = dest.parent / f"{dest.name}.tar"
        subprocess.run(["git", "-C", str(self.path), "archive", "-o", str(archive), rev], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
        archive.unlink()
        return dest
