"""kvdiag.workspace.history: the git questions a source tree answers, through the runner, memoised."""

from __future__ import annotations

from pathlib import Path

from target_helpers import run
from kvdiag.workspace.history import TreeHistory


def commit(repo: Path, log_dir: Path, message: str) -> str:
    (repo / f"{message}.txt").write_text(message)
    run(["git", "add", "."], repo, log_dir, "t-add")
    run(["git", "commit", "-q", "-m", message], repo, log_dir, "t-commit")
    return (repo / ".git" / "refs" / "heads" / "main").read_text().strip()


def test_facts_of_a_complete_clone(git_repo: Path, log_dir: Path):
    run(["git", "remote", "add", "origin", "https://github.com/ggml-org/ggml.git"], git_repo, log_dir, "t-remote")
    first = (git_repo / ".git" / "refs" / "heads" / "main").read_text().strip()
    second = commit(git_repo, log_dir, "second")
    facts = TreeHistory(git_repo, log_dir).facts()
    assert (facts.head, facts.why_none, facts.shallow) == (second, None, False)
    assert facts.remote_urls == ("https://github.com/ggml-org/ggml.git",)
    assert facts.roots == (first,)


def test_commits_and_ancestry(git_repo: Path, log_dir: Path):
    first = (git_repo / ".git" / "refs" / "heads" / "main").read_text().strip()
    second = commit(git_repo, log_dir, "second")
    history = TreeHistory(git_repo, log_dir)
    assert history.has_commit(first) and not history.has_commit("1" * 40)
    assert history.is_ancestor(first, second) is True and history.is_ancestor(second, first) is False
    assert history.is_ancestor(second, second) is True                  # git counts a commit its own ancestor
    assert history.is_ancestor("1" * 40, second) is None                # a commit git does not have


def test_no_history_says_why(tmp_path: Path, log_dir: Path, git_env):
    plain = tmp_path / "tarball"
    plain.mkdir()
    assert TreeHistory(plain, log_dir).facts().why_none == f"no .git: {plain} is not a git checkout"
    assert TreeHistory(tmp_path / "gone", log_dir).facts().why_none.endswith("does not exist here")
    assert TreeHistory(None, log_dir).facts().why_none.startswith("the build names no source tree")


def test_without_git_installed_nothing_is_asked(tmp_path: Path, log_dir: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert TreeHistory(tmp_path, log_dir).facts().why_none == "git is not installed here"


def test_a_partial_clone_is_never_made_to_fetch_what_it_lacks(tmp_path: Path, git_repo: Path, log_dir: Path):
    """A --filter clone fetches a missing object from its remote on first use, even for `cat-file -e`;
    kvdiag's questions must answer from what is here (a remote can be a host this machine cannot
    reach: 57 s measured for one entry's questions)."""
    for key, value in (("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true")):
        run(["git", "config", key, value], git_repo, log_dir, "t-config")
    partial = tmp_path / "partial"
    run(["git", "clone", "-q", "--filter=blob:none", f"file://{git_repo}", str(partial)], tmp_path, log_dir, "t-clone")
    later = commit(git_repo, log_dir, "later")
    assert TreeHistory(partial, log_dir).has_commit(later) is False
    plain = run(["git", "cat-file", "-e", f"{later}^{{commit}}"], partial, log_dir, "t-plain")
    assert plain.returncode == 0, "plain git fetched it on the spot: the check above is what prevents that"
