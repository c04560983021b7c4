"""Scratch worktrees: never the user's tree, and always removed — on success, failure and Ctrl-C."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdiag.probes.patch import ProbeError, load_probes
from kvdiag.probes.worktree import RECORD_FILE, WorktreeError, apply_stack, scratch_worktree
from probes_helpers import REPO, SCENARIOS, git, run_cli
from process_checks import interrupted_output


def worktrees(source: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(source, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def user_state(source: Path) -> tuple[str, str, str, str]:
    """What kvdiag must never change: status, branches, HEAD, and the index's content."""
    return (git(source, "status", "--porcelain", "--untracked-files=all"), git(source, "branch", "-a"),
            git(source, "rev-parse", "HEAD"), git(source, "ls-files", "--stage"))


def test_worktree_is_detached_and_removed_on_success(source: Path, probes_dir: Path, log_dir: Path):
    before = user_state(source)
    probes = load_probes(probes_dir)
    with scratch_worktree(source, "HEAD", log_dir=log_dir) as wt:
        assert wt.path.is_dir() and str(wt.path) in worktrees(source)
        assert git(wt.path, "rev-parse", "--abbrev-ref", "HEAD") == "HEAD"        # detached
        assert apply_stack(wt, [probes.get("base"), probes.get("needs-base")]) is None
        assert "line 3 (more)" in (wt.path / "src/kernel.cu").read_text()
        assert wt.applied == ["base", "needs-base"]
        assert wt.revert(probes.get("needs-base")).ok and wt.applied == ["base"]
        assert "line 3 (base)" in (wt.path / "src/kernel.cu").read_text()
        assert user_state(source) == before
        path = wt.path
    assert not path.exists()
    assert worktrees(source) == [str(source)]
    assert user_state(source) == before
    assert "line 3\n" in (source / "src/kernel.cu").read_text()


def test_worktree_is_removed_when_a_probe_does_not_apply(source: Path, probes_dir: Path, log_dir: Path):
    before = user_state(source)
    probes = load_probes(probes_dir)
    with pytest.raises(ProbeError):
        with scratch_worktree(source, "HEAD", log_dir=log_dir) as wt:
            path = wt.path
            failed = apply_stack(wt, [probes.get("base"), probes.get("clash")])
            assert failed is not None and failed.probe.name == "clash" and failed.mode == "check"
            assert "error: patch failed: src/kernel.cu:1" in failed.errors
            raise ProbeError(failed.describe())
    assert not path.exists()
    assert worktrees(source) == [str(source)]
    assert user_state(source) == before


def test_keep_leaves_the_worktree(source: Path, log_dir: Path, tmp_path: Path):
    with scratch_worktree(source, "HEAD", log_dir=log_dir, path=tmp_path / "kept", keep=True) as wt:
        pass
    assert (tmp_path / "kept" / "README").is_file() and str(wt.path) in worktrees(source)


def test_bad_source_and_commit_are_usage_errors(source: Path, log_dir: Path, tmp_path: Path):
    with pytest.raises(WorktreeError, match="is not a git checkout"):
        with scratch_worktree(tmp_path, "HEAD", log_dir=log_dir):
            pass
    with pytest.raises(WorktreeError, match="'v9.9' is not a commit"):
        with scratch_worktree(source, "v9.9", log_dir=log_dir):
            pass
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    with pytest.raises(WorktreeError, match="already exists"):
        with scratch_worktree(source, "HEAD", log_dir=log_dir, path=tmp_path / "busy"):
            pass
    assert worktrees(source) == [str(source)]


def test_worktree_is_removed_on_ctrl_c(source: Path, log_dir: Path):
    before = user_state(source)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the scenario resets SIGINT itself (under nohup it starts ignored); `with` closes its pipes
    with subprocess.Popen([sys.executable, str(SCENARIOS / "holds_worktree.py"), str(source), str(log_dir)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as child:
        path = Path(child.stdout.readline().strip())
        ready = child.stdout.readline().strip() == "ready"
        held = ready and (path / "scratch-output.txt").is_file() and str(path) in worktrees(source)
        out, err = interrupted_output(child)
    assert held, err
    assert child.returncode == 130, err
    assert "interrupted" in out
    assert not path.exists() and not path.parent.exists()
    assert worktrees(source) == [str(source)]
    assert user_state(source) == before


def test_apply_revert_drop_commands(source: Path, probes_dir: Path, tmp_path: Path, capsys):
    before = user_state(source)
    into = tmp_path / "wt"
    args = ["--probes", str(probes_dir)]
    assert run_cli(["probe", "apply", "needs-base", "--source", str(source), "--into", str(into), *args]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(into.absolute())
    assert "applied base" in captured.err and "applied needs-base" in captured.err
    record = json.loads((into / RECORD_FILE).read_text())
    assert record["applied"] == ["base", "needs-base"] and record["source"] == str(source)
    assert "line 3 (more)" in (into / "src/kernel.cu").read_text()
    # add to it later
    assert run_cli(["probe", "apply", "other", "--into", str(into), *args]) == 0
    assert json.loads((into / RECORD_FILE).read_text())["applied"] == ["base", "needs-base", "other"]
    # base cannot go while needs-base stays
    assert run_cli(["probe", "revert", "base", "--worktree", str(into), *args]) == 64
    assert "needs-base stays applied and requires base" in capsys.readouterr().err
    assert run_cli(["probe", "revert", "--worktree", str(into), *args]) == 0
    assert capsys.readouterr().out.splitlines() == ["reverted other", "reverted needs-base", "reverted base"]
    assert (into / "src/kernel.cu").read_text() == (source / "src/kernel.cu").read_text()
    assert json.loads((into / RECORD_FILE).read_text())["applied"] == []
    assert run_cli(["probe", "drop", str(into)]) == 0
    assert not into.exists() and worktrees(source) == [str(source)]
    assert user_state(source) == before


def test_apply_that_conflicts_removes_its_worktree(source: Path, probes_dir: Path, tmp_path: Path, capsys):
    into = tmp_path / "wt"
    code = run_cli(["probe", "apply", "base", "clash", "--source", str(source), "--into", str(into),
                    "--probes", str(probes_dir)])
    err = capsys.readouterr().err
    assert code == 1
    assert "clash conflicts with base:" in err and "error: patch failed: src/kernel.cu:1" in err
    assert not into.exists() and worktrees(source) == [str(source)]


def test_drop_refuses_a_folder_kvdiag_did_not_make(source: Path, capsys):
    assert run_cli(["probe", "drop", str(source)]) == 64
    assert "not a worktree made by `kvdiag probe apply`" in capsys.readouterr().err
    assert (source / "README").is_file()
