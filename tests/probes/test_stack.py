"""Ordered probe stacks: requires, cycles, and a check that names what conflicts with what."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.probes.patch import ProbeError, load_probes
from kvdiag.probes.stack import StackCycle, check_stack, order_stack
from kvdiag.probes.worktree import apply_directory, scratch_worktree
from probes_helpers import REPO, diff_of, git, make_repo, run_cli, write_probe


def names(stack) -> list[str]:
    return [p.name for p in stack]


def test_requires_come_first_and_order_is_kept_otherwise(probes_dir: Path):
    probes = load_probes(probes_dir)
    assert names(order_stack(["needs-base"], probes)) == ["base", "needs-base"]
    assert names(order_stack(["other", "needs-base"], probes)) == ["other", "base", "needs-base"]
    assert names(order_stack(["base", "needs-base", "base"], probes)) == ["base", "needs-base"]


def test_a_cycle_is_an_error_naming_it(tmp_path: Path):
    diff = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    write_probe(tmp_path, "a", diff, requires="b")
    write_probe(tmp_path, "b", diff, requires="c")
    write_probe(tmp_path, "c", diff, requires="a")
    with pytest.raises(StackCycle, match=r"cycle: a -> b -> c -> a"):
        order_stack(["a"], load_probes(tmp_path))


def test_unknown_names_are_errors(probes_dir: Path):
    with pytest.raises(ProbeError, match="no probe 'nope'"):
        order_stack(["nope"], load_probes(probes_dir))


def test_check_of_a_clean_stack(source: Path, probes_dir: Path, log_dir: Path):
    stack = order_stack(["other", "needs-base", "new-file"], load_probes(probes_dir))
    result = check_stack(source, "HEAD", stack, log_dir=log_dir)
    assert result.ok, result.lines()
    assert [r.ok for r in result.results] == [True, True, True, True]
    assert git(source, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_check_names_the_conflicting_probe_and_gits_lines(source: Path, probes_dir: Path, log_dir: Path):
    stack = order_stack(["other", "base", "clash"], load_probes(probes_dir))
    result = check_stack(source, "HEAD", stack, log_dir=log_dir)
    assert not result.ok
    assert result.conflict.probe.name == "clash"
    assert names(result.conflict.with_probes) == ["base"]           # not "other": it touches other lines
    assert "error: patch failed: src/kernel.cu:1" in result.conflict.errors
    lines = result.lines()
    assert lines[:3] == ["ok   other", "ok   base", "FAIL clash"]
    assert "clash conflicts with base:" in lines
    assert "  error: patch failed: src/kernel.cu:1" in lines


def test_check_of_a_probe_that_does_not_fit_the_commit(source: Path, probes_dir: Path, log_dir: Path):
    # needs-base without base: it does not apply to the commit itself
    stack = (load_probes(probes_dir).get("needs-base"),)
    result = check_stack(source, "HEAD", stack, log_dir=log_dir)
    assert result.conflict.alone_fails
    assert result.conflict.describe(result.commit).startswith("needs-base conflicts with the commit ")


def test_probe_check_command(source: Path, probes_dir: Path, capsys):
    code = run_cli(["probe", "check", "base", "clash", "--source", str(source), "--probes", str(probes_dir)])
    out = capsys.readouterr().out
    assert code == 1
    assert "clash conflicts with base:" in out and "error: patch failed: src/kernel.cu:1" in out
    assert run_cli(["probe", "check", "needs-base", "--source", str(source), "--probes", str(probes_dir)]) == 0
    assert "base -> needs-base" in capsys.readouterr().out
    assert run_cli(["probe", "check", "base", "--source", str(source), "--commit", "no-such-rev",
                    "--probes", str(probes_dir)]) == 64
    assert "'no-such-rev' is not a commit" in capsys.readouterr().err


def test_llama_cpp_layout_applies_ggml_probes_under_ggml(tmp_path: Path, git_env, log_dir: Path):
    """A probe written for ggml (src/ggml-cuda/…) goes to ggml/src/ggml-cuda/… in a llama.cpp tree."""
    ggml = make_repo(tmp_path / "ggml", {"src/ggml-cuda/fattn.cuh": "a\nb\nc\n"})
    write_probe(tmp_path / "probes", "fa", diff_of(ggml, {"src/ggml-cuda/fattn.cuh": "a\nB\nc\n"}),
                prefix="src/ggml-cuda")
    llama = make_repo(tmp_path / "llama", {"ggml/src/ggml-cuda/fattn.cuh": "a\nb\nc\n", "src/llama.cpp": "x\n",
                                           "tests/test-backend-ops.cpp": "t\n"})
    probe = load_probes(tmp_path / "probes").get("fa")
    with scratch_worktree(llama, "HEAD", log_dir=log_dir) as wt:
        assert apply_directory(wt.path, probe) == "ggml"
        result = wt.apply(probe)
        assert result.ok and result.directory == "ggml"
        assert (wt.path / "ggml/src/ggml-cuda/fattn.cuh").read_text() == "a\nB\nc\n"
    with scratch_worktree(ggml, "HEAD", log_dir=log_dir) as wt:
        assert apply_directory(wt.path, probe) is None
    # the real probes: the D2 ones go under ggml/ there, the test-backend-ops one does not
    real = load_probes(REPO / "probes")
    (llama / "ggml/src/ggml-cuda/fattn-mma-f16.cuh").write_text("x\n")
    assert apply_directory(llama, real.get("D2-fix-uniform-barrier")) == "ggml"
    assert apply_directory(llama, real.get("print-every-case-error")) is None
