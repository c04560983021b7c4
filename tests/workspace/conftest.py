"""Fixtures for the kvdiag.workspace tests: fake build dirs, isolated git."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from isolation import isolate_git
from target_helpers import FIXTURES, run


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


@pytest.fixture
def fixture_build(tmp_path: Path):
    """Copy ``tests/fixtures/builds/<name>`` into tmp_path (modes kept) and return the copy."""

    def copy(name: str) -> Path:
        dest = tmp_path / "builds" / name
        shutil.copytree(FIXTURES / name, dest)
        return dest

    return copy


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git isolated from the user's and system's configuration, with an identity."""
    isolate_git(monkeypatch, tmp_path / "home")


@pytest.fixture
def git_repo(tmp_path: Path, git_env, log_dir: Path):
    """A fresh repository with one commit (``src.c``, ``CMakeLists.txt``) on branch main."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "src.c").write_text("int main(void) { return 0; }\n")
    (repo / "CMakeLists.txt").write_text("project(demo C)\n")
    run(["git", "-c", "init.defaultBranch=main", "init", "-q"], repo, log_dir, "t-git-init")
    run(["git", "add", "."], repo, log_dir, "t-git-add")
    run(["git", "commit", "-q", "-m", "first"], repo, log_dir, "t-git-commit")
    return repo
