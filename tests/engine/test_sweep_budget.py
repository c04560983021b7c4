"""A sweep that finishes: step budgets, the sweep file after every entry, --skip-builds.

The stand-in build (tests/scenarios/builds_forever.py, installed as `ninja`) prints
ninja's first status lines, starts a child and never ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvdiag.engine.sweep.session as sweep_mod
from engine_helpers import REPO
from kvdiag.engine.verdict.processes import BUDGET_FLOOR_S, compiles, step_budget
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.sweep.session import run_sweep
from kvdiag.errors import UsageError
from kvdiag.store.sweeps import load_sweep
from process_checks import pid_gone, wait_until

SCENARIOS = REPO / "tests" / "scenarios"


def fake_ninja(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ninja = folder / "ninja"
    ninja.symlink_to(SCENARIOS / "builds_forever.py")
    return ninja


def forever_body(ninja: Path, pids: Path, expected: float = 1) -> str:
    return f'''
[requires]
gpu = false

[[repro]]
name = "build"
kind = "command"
default = true
description = "A stand-in build that never ends."
commands = [["{ninja}", "{pids}"]]
timeout = 600
expected_seconds = {expected}

[[signature]]
type = "output"
stream = "combined"
pattern = 'no instance of function template'
'''


def quick_body() -> str:
    return f'''
[requires]
gpu = false

[[repro]]
name = "echo"
kind = "command"
default = true
description = "Prints its argument."
commands = [["python3", "{SCENARIOS / 'echoes_argv.py'}", "hello"]]
timeout = 60

[[signature]]
type = "output"
stream = "combined"
pattern = 'hello'
'''


def end_and_reap(pid: int) -> None:
    """Kill a stand-in the killed sweep left behind; reap it when it was reparented to us
    (the runner makes this process a child subreaper), so no zombie outlives the test."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        wait_until(lambda: pid_gone(pid), 10)


def pids_of(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.fixture
def in_process(kv, monkeypatch):
    """run_sweep on a scenario target (no GPU, no control canaries)."""
    target = kv.target(kv.build("backend_ops_all_ok"), sanitizer=None)
    monkeypatch.setattr(sweep_mod, "prepare_target", lambda build_dir, **kw: target)
    monkeypatch.setattr(sweep_mod, "controls_gate_provider", lambda home, t, log_dir: no_sanitizer_gate)
    return target


def test_budget_comes_from_expected_seconds_with_a_floor_and_the_timeout_as_cap(kv):
    ninja = Path("/x/ninja")
    step = kv.entry("D905", forever_body(ninja, Path("/x/p"), expected=1)).default_step
    assert step_budget(step) == BUDGET_FLOOR_S                     # 5 x 1 s is below the floor
    assert step_budget(kv.entry("D906", forever_body(ninja, Path("/x/p"), expected=100)).default_step) == 500
    assert step_budget(kv.entry("D907", forever_body(ninja, Path("/x/p"), expected=1000)).default_step) == 600
    assert step_budget(step, 7) == 7                               # --step-budget wins
    for never in (float("nan"), float("inf"), 0, -1):                # would turn the deadline off
        with pytest.raises(UsageError, match="finite number of seconds above 0"):
            step_budget(step, never)
    assert compiles(step)
    assert not compiles(kv.entry("D908", quick_body()).default_step)


def test_a_build_that_never_ends_is_inconclusive_with_its_partial_log_and_the_sweep_finishes(
        kv, in_process, tmp_path):
    pids = tmp_path / "build.pids"
    hang = kv.entry("D901", forever_body(fake_ninja(tmp_path / "bin"), pids))
    quick = kv.entry("D902", quick_body())
    save = tmp_path / "sweep.json"
    started = time.monotonic()
    result = run_sweep([hang, quick], tmp_path, step_budget=2, save=save, record=False)
    assert time.monotonic() - started < 30
    by_id = {o.entry_id: o for o in result.sweep.outcomes}
    stuck = by_id["D901"]
    assert stuck.verdict.value == "inconclusive"
    assert "exceeded its 2 s budget" in stuck.reason
    assert "partial log kept: logs/build-1.combined.log" in stuck.reason
    log = (Path(stuck.run_dir) / "logs" / "build-1.combined.log").read_text()
    assert "[3/120] Building CUDA object" in log
    assert "TERM=dumb" in log               # a build step's ninja prints lines, not a rewritten status
    assert by_id["D902"].verdict.value == "confirmed"
    assert not result.sweep.interrupted
    assert [o.entry_id for o in load_sweep(save).outcomes] == ["D901", "D902"]
    # the stand-in and its compiler child are gone
    assert len(pids_of(pids)) == 2
    assert wait_until(lambda: all(pid_gone(p) for p in pids_of(pids)), 10)


def test_skip_builds_skips_the_steps_that_compile_and_says_so(kv, in_process, tmp_path):
    pids = tmp_path / "build.pids"
    hang = kv.entry("D901", forever_body(fake_ninja(tmp_path / "bin"), pids))
    quick = kv.entry("D902", quick_body())
    result = run_sweep([hang, quick], tmp_path, skip_builds=True, record=False)
    by_id = {o.entry_id: o for o in result.sweep.outcomes}
    assert by_id["D901"].verdict.value == "skipped"
    assert "build checks skipped (--skip-builds)" in by_id["D901"].reason
    assert by_id["D902"].verdict.value == "confirmed"
    assert not pids.exists()                     # nothing was started
    assert result.run_dir.read()["skip_builds"] is True


def test_save_refuses_a_path_that_is_not_a_regular_file(kv, in_process, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(UsageError, match="not a regular file"):
        run_sweep([kv.entry("D902", quick_body())], tmp_path, save=folder, record=False)
    assert folder.is_dir()


# ------------------------------------------------------------------ the CLI in its own process


def sweep_process(kv, tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KVDIAG_HOME": str(tmp_path / "home")}
    code = "import sys; from kvdiag.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "--registry", str(kv.registry_dir), "sweep", "--build",
            str(kv.build("backend_ops_all_ok")), "--no-staleness", *args]
    return subprocess.Popen(argv, env=env, **popen)


def test_a_killed_sweep_keeps_the_entries_it_had(kv, tmp_path):
    pids = tmp_path / "build.pids"
    kv.entry("D903", quick_body())
    kv.entry("D904", forever_body(fake_ninja(tmp_path / "bin"), pids, expected=500))
    save = tmp_path / "sweep.json"
    proc = sweep_process(kv, tmp_path, "--save", str(save), "--quiet",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: len(pids_of(pids)) == 2, 60), "the stand-in build never started"
        os.kill(proc.pid, signal.SIGKILL)           # mid-sweep: D904 is building
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids_of(pids):                   # the stand-in runs in its own session
            end_and_reap(pid)
    data = json.loads(save.read_text())
    assert [o["entry"] for o in data["outcomes"]] == ["D903"]
    assert data["outcomes"][0]["verdict"] == "confirmed"
    assert data["interrupted"] is True               # not every entry is in
    assert data["selection"] == ["D903", "D904"]
    stored = list((tmp_path / "home" / "runs").glob("*sweep*/sweep.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["outcomes"][0]["entry"] == "D903"


@pytest.mark.parametrize("on_a_terminal", [True, False])
def test_progress_shows_on_a_terminal_and_not_in_a_pipe(kv, tmp_path, on_a_terminal):
    import pty

    kv.entry("D901", forever_body(fake_ninja(tmp_path / "bin"), tmp_path / "build.pids"))
    kv.entry("D902", quick_body())
    if on_a_terminal:
        master, slave = pty.openpty()
        proc = sweep_process(kv, tmp_path, "--step-budget", "3", stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:          # EIO: the other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(master)
        err = b"".join(chunks).decode(errors="replace")
    else:
        proc = sweep_process(kv, tmp_path, "--step-budget", "3", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.communicate(timeout=120)[1].decode()
    assert proc.wait(120) == 1                       # D902 confirmed (D901 inconclusive)
    assert "kvdiag: build checks: on (--skip-builds skips them); step budget: 3 s" in err
    assert "kvdiag: D901 inconclusive" in err
    shown = ["entries: ", "[3/120] Building CUDA object", "D901 [build] run 1/1", " of 3 s"]
    if on_a_terminal:
        assert all(s in err for s in shown), err
    else:
        assert not any(s in err for s in shown), err
        assert "\r" not in err and "\x1b[" not in err
