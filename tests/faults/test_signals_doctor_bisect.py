"""Issue 28: `kvdiag doctor` and `kvdiag bisect` end on the first signal, whole tree included.

doctor once caught the runner's interruption as a failed command: each SIGINT or SIGTERM
ended one control's compute-sanitizer, the next control started, and later signals were
ignored (10 minutes under a hanging sanitizer, until SIGKILL, run dirs without run.json).
Each scenario here runs kvdiag as a real process under a stand-in that hangs with a
setsid'd child (the tests' one fake compute-sanitizer in its `hangs` mode, or a build
command that never ends), sends one signal once the stand-in runs, and asserts: the exit
code of that signal, one line and no traceback, the run recorded `interrupted`, no run
folder left without a final run.json, no process of the tree alive, and nothing started
after the signal.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sys

import pytest

from faults_helpers import (BUILDS, Faults, assert_all_gone, fake_gpu_toolchain, git_project, no_run_left_open,
                            one_line, signal_when_started, started_runs)

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]

ENTRY = """\
```toml
[defect]
id = "D91"
title = "Synthetic defect for bisect's signal scenarios"
summary = "The synthetic project's kernel reaches a barrier divergently; the entry's step runs under a sanitizer."
owner = "upstream"
status = "open"
severity = "low"
reported = "2026-01-01"
modified = "2026-01-02"

[location]
component = "synthetic/kernel"
files = ["kernel.txt"]

[requires]
binaries = ["test-backend-ops"]
gpu = false
sanitizer = {sanitizer}

[[repro]]
name = "fast"
kind = "backend-ops"
default = true
description = "One hsk=256 case of the synthetic project."
argv = ["{{{{ bin['test-backend-ops'] }}}}", "test", "-o", "FLASH_ATTN_EXT", "-b", "CUDA0", "-p", "hsk=256,nh=4,kv=512"]
timeout = 600
{tool}
[[signature]]
type = "output"
step = "fast"
pattern = "Barrier error detected"
```

# D91 — synthetic
"""


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


# --------------------------------------------------------------------------- bisect


def _bisect_world(kv: Faults, *, sanitizer: bool) -> tuple[list[str], dict | None]:
    """A registry with D91 and a two-commit project (good, then divergent): the bisect argv."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    registry = kv.root / "registry"
    registry.mkdir()
    (registry / "D91.md").write_text(ENTRY.format(sanitizer="true" if sanitizer else "false",
                                                  tool='sanitizer = "synccheck"\n' if sanitizer else ""))
    source, commits = git_project(kv.root / "project", ["uniform", "divergent"])
    python = shlex.quote(sys.executable)
    argv = ["--registry", registry, "bisect", "D91", "--source", source, "--good", commits[0], "--bad", commits[1],
            "--configure-cmd", f"{python} {{source}}/configure.py {{build}}"]
    return argv, None


def _bisect_env(kv: Faults, env: dict | None = None) -> dict:
    from faults_helpers import GIT_ENV
    import os

    base = dict(os.environ if env is None else env)
    return {**base, **GIT_ENV, "TMPDIR": str(kv.root)}


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_build_command_ends_on_the_first_signal(kv: Faults, sig, code):
    argv, _ = _bisect_world(kv, sanitizer=False)
    stand_in = kv.root / "stand-in"
    (stand_in / "bin").mkdir(parents=True)
    hangs = stand_in / "bin" / "build.sh"
    shutil.copyfile(BUILDS / "hangs_with_setsid_child.sh", hangs)      # its pids go to stand-in/pids
    hangs.chmod(0o755)
    proc = kv.spawn(*argv, "--build-cmd", f"{hangs} {{build}}", env=_bisect_env(kv))
    pids, exit_code = signal_when_started(proc, stand_in, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    data = kv.run_json("D91-bisect")
    assert data["status"] == "interrupted"
    assert [p.name for p in kv.root.iterdir() if p.name.startswith("kvdiag-bisect-")] == []


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_sanitizer_ends_on_the_first_signal(kv: Faults, sig, code):
    argv, _ = _bisect_world(kv, sanitizer=True)
    env, sanitizer = fake_gpu_toolchain(kv, "hangs")
    python = shlex.quote(sys.executable)
    proc = kv.spawn(*argv, "--build-cmd", f"{python} {{source}}/build.py {{build}}", "--sanitizer", sanitizer,
                    env=_bisect_env(kv, env))
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1
    assert kv.run_json("D91-bisect")["status"] == "interrupted"
    steps = json.loads((kv.runs("D91-bisect")[-1] / "bisect-steps.json").read_text())
    assert all(s["verdict"] != "not-reproduced" for s in steps)       # an interrupted step is no verdict
