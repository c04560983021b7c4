"""Issue 28: `kvdiag doctor`, `bisect` and `verify` end on the first signal, whole tree included.

doctor once caught the runner's interruption as a failed command: each SIGINT or SIGTERM
ended one control's compute-sanitizer, the next control started, and later signals were
ignored (10 minutes under a hanging sanitizer, until SIGKILL, run dirs without run.json).
Each scenario here runs kvdiag as a real process under a stand-in that hangs with a
setsid'd child (the tests' one fake compute-sanitizer in its `hangs` mode, or a build
command that never ends), sends one signal once the stand-in runs, and asserts: the exit
code of that signal, one line and no traceback, the run recorded `interrupted`, no run
folder left without a final run.json, no process of the tree alive, and nothing started
after the signal. bisect, verify and run work on the synthetic project and entry (D90)
of tests/engine/git_projects.py.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from faults_helpers import (BUILDS, REPO, Faults, assert_all_gone, fake_gpu_toolchain, no_run_left_open, one_line,
                            signal_when_started, started_runs)
from kvdiag.workspace.scratch_build import substitute

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "Test",
           "GIT_AUTHOR_EMAIL": "test@example.invalid", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "test@example.invalid"}


def _synthetic():
    """tests/engine/git_projects.py: the synthetic project, its entry D90 and its probe."""
    path = REPO / "tests" / "engine" / "git_projects.py"
    spec = importlib.util.spec_from_file_location("kvdiag_faults_synthetic_project", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SYNTHETIC = _synthetic()
PROBE = SYNTHETIC.PROBE.format(name="fix-uniform", new="uniform", summary="Make the barrier uniform.")


def _entry(sanitizer: bool) -> str:
    """D90, its default step under synccheck when ``sanitizer``."""
    if not sanitizer:
        return SYNTHETIC.ENTRY
    under = SYNTHETIC.ENTRY.replace("sanitizer = false", "sanitizer = true", 1).replace(
        'name = "fast"\nkind = "backend-ops"\ndefault = true\n',
        'name = "fast"\nkind = "backend-ops"\ndefault = true\nsanitizer = "synccheck"\n', 1)
    assert under.count('sanitizer = "synccheck"') == 1 and "sanitizer = true" in under, "update _entry"
    return under


def _project_world(kv: Faults, monkeypatch, *, sanitizer: bool) -> tuple[Path, list[str], list[str]]:
    """A registry with D90 and the project at two commits (uniform, then divergent): (source, commits,
    the arguments every command here starts with). git runs without the user's configuration."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    for name, value in {**GIT_ENV, "TMPDIR": str(kv.root)}.items():
        monkeypatch.setenv(name, value)
    registry = kv.root / "registry"
    registry.mkdir()
    (registry / "D90.md").write_text(_entry(sanitizer))
    source = SYNTHETIC.new_project(kv.root / "project", kernel="uniform")
    commits = [SYNTHETIC.git(source, "rev-parse", "HEAD"), SYNTHETIC.commit(source, "split", kernel="divergent")]
    return source, commits, ["--registry", registry, "--configure-cmd", SYNTHETIC.CONFIGURE]


def _hanging_build_command(kv: Faults) -> tuple[Path, str]:
    """A build command that hangs with a setsid'd child: (the folder its pids go to, the command)."""
    stand_in = kv.root / "stand-in"
    (stand_in / "bin").mkdir(parents=True)
    hangs = stand_in / "bin" / "build.sh"
    shutil.copyfile(BUILDS / "hangs_with_setsid_child.sh", hangs)      # its pids go to stand-in/pids
    hangs.chmod(0o755)
    return stand_in, f"{hangs} {{build}}"


def _interrupted_line(sig: int) -> str:
    return f"kvdiag: interrupted by {signal.Signals(sig).name}; the partial run is recorded"


def _assert_ended(kv: Faults, code: int, expected: int, sig: int, pids: list[int]) -> None:
    err = kv.stderr_of_spawned()
    assert code == expected, err
    assert one_line(err) == _interrupted_line(sig)
    assert_all_gone(pids)
    no_run_left_open(kv)


# --------------------------------------------------------------------------- doctor


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_doctor_under_a_hanging_sanitizer_ends_on_the_first_signal(kv: Faults, sig, code):
    env, sanitizer = fake_gpu_toolchain(kv, "hangs")
    proc = kv.spawn("doctor", "--refresh", "--sanitizer", sanitizer, env=env)
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1        # no second control started after the signal
    data = kv.run_json("doctor")
    assert data["status"] == "interrupted" and data["reason"] == f"interrupted by {signal.Signals(sig).name}"
    assert not (kv.home / "controls.json").exists()   # an interrupted control is no record of the tool


@pytest.mark.parametrize("sig, code", SIGNALS[:2])
def test_a_signal_during_a_runs_control_ends_the_run_and_records_no_failed_control(kv: Faults, monkeypatch,
                                                                                   sig, code):
    """`kvdiag run` consults the control only for a would-be not-reproduced; the control's hanging canary
    took the signal as "compute-sanitizer cannot be run", stored a failed control for the machine
    (every later run inconclusive until `doctor --refresh`) and went on."""
    source, commits, common = _project_world(kv, monkeypatch, sanitizer=True)
    build = kv.root / "uniform-build"          # the uniform commit built: one case, OK, exit 0
    SYNTHETIC.git(source, "checkout", "-q", commits[0])
    for cmd in (SYNTHETIC.CONFIGURE, SYNTHETIC.BUILD):
        subprocess.run(substitute(cmd, {"source": str(source), "build": str(build)}), check=True,
                       capture_output=True)
    env, sanitizer = fake_gpu_toolchain(kv, "canaries-hang")
    proc = kv.spawn(common[0], common[1], "run", "D90", "--build", build, "--no-staleness",
                    "--sanitizer", sanitizer, env=env)
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1
    data = kv.run_json("D90")
    assert data["status"] == "interrupted" and data.get("outcome", {}).get("verdict") != "inconclusive"
    controls = kv.home / "controls.json"
    assert not controls.exists() or "synccheck" not in controls.read_text()


# --------------------------------------------------------------------------- bisect


def _bisect_args(kv: Faults, monkeypatch, *, sanitizer: bool) -> list[str]:
    source, commits, common = _project_world(kv, monkeypatch, sanitizer=sanitizer)
    return [common[0], common[1], "bisect", "D90", "--source", source, "--good", commits[0], "--bad", commits[1],
            *common[2:]]


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_build_command_ends_on_the_first_signal(kv: Faults, monkeypatch, sig, code):
    args = _bisect_args(kv, monkeypatch, sanitizer=False)
    stand_in, build_cmd = _hanging_build_command(kv)
    proc = kv.spawn(*args, "--build-cmd", build_cmd)
    pids, exit_code = signal_when_started(proc, stand_in, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert kv.run_json("D90-bisect")["status"] == "interrupted"
    assert [p.name for p in kv.root.iterdir() if p.name.startswith("kvdiag-bisect-")] == []


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_sanitizer_ends_on_the_first_signal(kv: Faults, monkeypatch, sig, code):
    args = _bisect_args(kv, monkeypatch, sanitizer=True)
    env, sanitizer = fake_gpu_toolchain(kv, "hangs")
    proc = kv.spawn(*args, "--build-cmd", SYNTHETIC.BUILD, "--sanitizer", sanitizer, env=env)
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1
    assert kv.run_json("D90-bisect")["status"] == "interrupted"
    steps = json.loads((kv.runs("D90-bisect")[-1] / "bisect-steps.json").read_text())
    assert all(s["verdict"] != "not-reproduced" for s in steps)       # an interrupted step is no verdict


# --------------------------------------------------------------------------- verify


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_verify_with_a_hanging_build_command_ends_and_removes_its_worktree(kv: Faults, monkeypatch, sig, code):
    """(verify held already; kept beside bisect so that every long command is staged.)"""
    source, _, common = _project_world(kv, monkeypatch, sanitizer=False)
    probes = kv.root / "probes"
    probes.mkdir()
    (probes / "fix-uniform.patch").write_text(PROBE)
    stand_in, build_cmd = _hanging_build_command(kv)
    proc = kv.spawn(common[0], common[1], "verify", "D90", "--source", source, "--probe", "fix-uniform",
                    "--probes", probes, *common[2:], "--build-cmd", build_cmd)
    pids, exit_code = signal_when_started(proc, stand_in, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert kv.run_json("D90-verify")["status"] == "interrupted"
    assert SYNTHETIC.worktrees(source) == [str(source)]
    assert [p.name for p in kv.root.iterdir() if p.name.startswith("kvdiag-")] == []
