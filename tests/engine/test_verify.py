"""kvdiag verify on a synthetic project (CPU only, no GPU, no sanitizer); the project is git_projects'."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from git_projects import BUILD, CONFIGURE, PROBE, commit, env, git, new_project, run_cli, scratch_dirs, worktrees  # noqa: F401
from kvdiag.workspace.scratch_build import BuildRecipe, cmake_configure_argv, substitute
from kvdiag.engine.verify.session import Conclusion


@pytest.fixture
def project(tmp_path: Path, env: Path) -> Path:
    """The user's checkout (defect present), with an untracked file of theirs, and its built build dir."""
    src = new_project(tmp_path / "src", kernel="divergent")
    (src / "my-notes.txt").write_text("untracked work of the user\n")
    build = tmp_path / "user-build"
    for cmd in (CONFIGURE, BUILD):
        subprocess.run(substitute(cmd, {"source": str(src), "build": str(build)}), check=True, capture_output=True)
    return src


@pytest.fixture
def probes(tmp_path: Path) -> Path:
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "fix-uniform.patch").write_text(PROBE.format(name="fix-uniform", new="uniform",
                                                           summary="Make the barrier uniform."))
    (folder / "fix-wrong.patch").write_text(PROBE.format(name="fix-wrong", new="uniform but wrong",
                                                         summary="Uniform barrier, wrong arithmetic."))
    (folder / "stale.patch").write_text(PROBE.format(name="stale", new="uniform", summary="Out of date.")
                                        .replace("-barrier: divergent", "-barrier: something else"))
    return folder


def verify_args(env: Path, src: Path, probes: Path, probe: str, *extra: str) -> list[str]:
    return ["--registry", str(env), "verify", "D90", "--source", str(src), "--probe", probe,
            "--probes", str(probes), "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet", *extra]


# --------------------------------------------------------------------------- verify


def test_fix_is_verified_against_the_users_build(project: Path, env: Path, probes: Path, tmp_path: Path, capsys):
    status = git(project, "status", "--porcelain")
    code = run_cli(verify_args(env, project, probes, "fix-uniform", "--build", str(tmp_path / "user-build"),
                               "--format", "json"))
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0, captured.err
    assert report["before"]["verdict"] == "confirmed"
    assert report["after"]["verdict"] == "not-reproduced"
    assert report["conclusion"] == Conclusion.VERIFIED.value
    numeric = report["after"]["numeric"]
    assert [(n["executed"], n["passed"], n["failed"], n["ok"]) for n in numeric] == [(1, 1, 0, True)]
    assert report["before"]["build_dir"] == str(tmp_path / "user-build")
    assert report["after"]["configure_s"] is not None and report["after"]["build_s"] is not None
    # runs are recorded in the run store like any run
    for side in ("before", "after"):
        run = json.loads((Path(report[side]["run_dir"]) / "run.json").read_text())
        assert run["entry"] == "D90" and run["outcome"]["verdict"] == report[side]["verdict"]
    # the user's tree is untouched and nothing of the scratch tree is left
    assert report["source_status_unchanged"] is True
    assert git(project, "status", "--porcelain") == status
    assert "barrier: divergent" in (project / "kernel.txt").read_text()
    assert worktrees(project) == [str(project)]
    assert not Path(report["after"]["build_dir"]).exists()
    assert scratch_dirs() == []


def test_fix_that_breaks_results_is_not_verified(project: Path, env: Path, probes: Path, tmp_path: Path,
                                                 capsys):
    code = run_cli(verify_args(env, project, probes, "fix-wrong", "--build", str(tmp_path / "user-build"),
                               "--numeric-params", "hsk=256"))
    out = capsys.readouterr().out
    assert code == 1
    assert "conclusion: fix silences the signature but breaks results" in out
    assert "  numeric: 1 case(s) FAIL (first: FLASH_ATTN_EXT(hsk=256,hsv=256,nh=4,kv=512))" in out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    # test-backend-ops exits 1 when a case FAILs: the AFTER repro is inconclusive, its signature gone
    assert rows["verdict"].split() == ["verdict", "confirmed", "inconclusive"]
    assert "1 OK / 0 FAIL" in rows["numeric"] and "0 OK / 1 FAIL" in rows["numeric"]
    assert "2 OK / 0 FAIL" in rows["numeric /hsk=256/"] and "0 OK / 2 FAIL" in rows["numeric /hsk=256/"]
    assert "source tree: untouched (git status --porcelain" in out
    assert "scratch worktree and build removed" in out
    assert worktrees(project) == [str(project)] and scratch_dirs() == []


def test_without_a_build_before_is_a_pristine_scratch_build(project: Path, env: Path, probes: Path, capsys):
    code = run_cli(verify_args(env, project, probes, "fix-uniform", "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["before"]["verdict"] == "confirmed" and report["before"]["build_s"] is not None
    assert any("pristine scratch build" in w for w in report["warnings"])
    assert worktrees(project) == [str(project)]


def test_a_probe_that_does_not_apply_fails_cleanly(project: Path, env: Path, probes: Path, capsys):
    code = run_cli(verify_args(env, project, probes, "stale"))
    err = capsys.readouterr().err.strip()
    assert code == 64
    assert len(err.splitlines()) == 1
    assert err.startswith("kvdiag: probe stale does not apply to ") and "error: patch failed: kernel.txt:1" in err
    assert worktrees(project) == [str(project)]
    assert scratch_dirs() == []


def test_a_failing_build_shows_its_log_tail_and_cleans_up(project: Path, env: Path, probes: Path, capsys):
    commit(project, "break the build", **{"kernel.txt": "kernel v1\nbarrier: divergent\nend\nsyntax error\n"})
    code = run_cli(verify_args(env, project, probes, "fix-uniform"))
    err = capsys.readouterr().err
    assert code == 4
    assert "after: build failed (exit 1)" in err
    assert "kernel.txt:1:1: error: expected ';' before '}' token" in err
    assert worktrees(project) == [str(project)]


def test_configuration_is_reused_from_the_users_cmake_cache(tmp_path: Path, env: Path):
    """Without --configure-cmd, the scratch build is configured from the user's CMakeCache.txt."""
    from kvdiag.workspace.build import inspect_build

    build = tmp_path / "cmake-build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text(
        "CMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_BUILD_TYPE:STRING=Release\nCMAKE_CUDA_ARCHITECTURES:STRING=90\n"
        "CMAKE_CUDA_FLAGS:STRING=-lineinfo -O3\nCMAKE_HOME_DIRECTORY:INTERNAL=/old/src\n"
        "CMAKE_CUDA_COMPILER:FILEPATH=/opt/cuda/bin/nvcc\nGGML_CUDA:BOOL=ON\nGGML_CUDA_FA_ALL_QUANTS:BOOL=OFF\n"
        "GGML_NATIVE:BOOL=OFF\nLLAMA_CURL:BOOL=OFF\nGGML_BIN_INSTALL_DIR:PATH=bin\nggml_SOURCE_DIR:STATIC=/old/src/ggml\n"
        "GGML_VERSION_INTERNAL:INTERNAL=0.1\n")
    info = inspect_build(build, log_dir=tmp_path / "logs", check_staleness=False)
    argv = cmake_configure_argv(info, Path("/new/src"), Path("/new/build"))
    assert argv[:7] == ["cmake", "-S", "/new/src", "-B", "/new/build", "-G", "Ninja"]
    assert argv[7:] == ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CUDA_ARCHITECTURES=90",
                        "-DCMAKE_CUDA_FLAGS=-lineinfo -O3", "-DCMAKE_CUDA_COMPILER:FILEPATH=/opt/cuda/bin/nvcc",
                        "-DGGML_BIN_INSTALL_DIR:PATH=bin", "-DGGML_CUDA:BOOL=ON", "-DGGML_CUDA_FA_ALL_QUANTS:BOOL=OFF",
                        "-DGGML_NATIVE:BOOL=OFF", "-DLLAMA_CURL:BOOL=OFF"]
    recipe = BuildRecipe(reference=info, targets=("test-backend-ops",), jobs=3)
    assert recipe.build_argv(Path("/new/src"), Path("/new/build")) == [
        "cmake", "--build", "/new/build", "--target", "test-backend-ops", "-j", "3"]
    assert substitute("tool --src '{source}/a b' -j{jobs}", recipe.values(Path("/s"), Path("/b"))) == [
        "tool", "--src", "/s/a b", "-j3"]
