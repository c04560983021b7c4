"""Issue 28: `kvdiag doctor`, `bisect` and `verify` end on the first signal, whole tree included.

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
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faults_helpers import (BUILDS, GIT_ENV, Faults, assert_all_gone, fake_gpu_toolchain, git_project,
                            no_run_left_open, one_line, signal_when_started, started_runs)

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


CLEAN_UNDER_SYNCCHECK = """\
```toml
[defect]
id = "D92"
title = "Synthetic sanitizer entry whose step runs clean"
summary = "A command under synccheck that prints nothing wrong: a not-reproduced that must consult the control."
owner = "upstream"
status = "open"
severity = "low"
reported = "2026-01-01"
modified = "2026-01-02"

[location]
component = "synthetic"

[requires]
binaries = ["test-backend-ops"]
gpu = false
sanitizer = true

[[repro]]
name = "clean"
kind = "command"
default = true
description = "The stand-in's support listing under synccheck: one case, exit 0, nothing else."
argv = ["{{ bin['test-backend-ops'] }}", "support"]
sanitizer = "synccheck"
timeout = 120

[[signature]]
type = "sanitizer"
step = "clean"
kind = "barrier-divergence"
```

# D92 — synthetic
"""


@pytest.mark.parametrize("sig, code", SIGNALS[:2])
def test_a_signal_during_a_runs_control_ends_the_run_and_records_no_failed_control(kv: Faults, sig, code):
    """`kvdiag run` consults the control only for a would-be not-reproduced; the control's hanging canary
    took the signal as "compute-sanitizer cannot be run", stored a failed control for the machine
    (every later run inconclusive until `doctor --refresh`) and went on."""
    registry = kv.root / "registry"
    registry.mkdir()
    (registry / "D92.md").write_text(CLEAN_UNDER_SYNCCHECK)
    env, sanitizer = fake_gpu_toolchain(kv, "canaries-hang")
    build = kv.build("hangs_with_setsid_child.sh")        # `support` answers at once, exit 0
    proc = kv.spawn("--registry", registry, "run", "D92", "--build", build, "--no-staleness",
                    "--sanitizer", sanitizer, env=env)
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1
    data = kv.run_json("D92")
    assert data["status"] == "interrupted" and data.get("outcome", {}).get("verdict") != "inconclusive"
    controls = kv.home / "controls.json"
    assert not controls.exists() or "synccheck" not in controls.read_text()


# --------------------------------------------------------------------------- bisect


PROBE = """\
kvdiag-probe: fix-uniform
defect: D91
kind: fix
repository: https://example.invalid/synthetic
commit: 0123456789abcdef0123456789abcdef01234567
path-prefix: kernel.txt
output-correct: expected yes
requires: none
summary: Make the barrier uniform.
---
diff --git a/kernel.txt b/kernel.txt
--- a/kernel.txt
+++ b/kernel.txt
@@ -1,3 +1,3 @@
 kernel v1
-barrier: divergent
+barrier: uniform
 end
"""


def _project_world(kv: Faults, *, sanitizer: bool) -> tuple[Path, list[str], list[str]]:
    """A registry with D91 and a two-commit project (good, then divergent): (source, commits, the
    arguments every command here starts with)."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    registry = kv.root / "registry"
    registry.mkdir()
    (registry / "D91.md").write_text(ENTRY.format(sanitizer="true" if sanitizer else "false",
                                                  tool='sanitizer = "synccheck"\n' if sanitizer else ""))
    source, commits = git_project(kv.root / "project", ["uniform", "divergent"])
    python = shlex.quote(sys.executable)
    return source, commits, ["--registry", registry, "--configure-cmd", f"{python} {{source}}/configure.py {{build}}"]


def _bisect_world(kv: Faults, *, sanitizer: bool) -> list[str]:
    source, commits, common = _project_world(kv, sanitizer=sanitizer)
    return [*common[:2], "bisect", "D91", "--source", source, "--good", commits[0], "--bad", commits[1], *common[2:]]


def _hanging_build_command(kv: Faults) -> tuple[Path, str]:
    """A build command that hangs with a setsid'd child: (the folder its pids go to, the command)."""
    stand_in = kv.root / "stand-in"
    (stand_in / "bin").mkdir(parents=True)
    hangs = stand_in / "bin" / "build.sh"
    shutil.copyfile(BUILDS / "hangs_with_setsid_child.sh", hangs)      # its pids go to stand-in/pids
    hangs.chmod(0o755)
    return stand_in, f"{hangs} {{build}}"


def _git_env(kv: Faults, env: dict | None = None) -> dict:
    base = dict(os.environ if env is None else env)
    return {**base, **GIT_ENV, "TMPDIR": str(kv.root)}


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_build_command_ends_on_the_first_signal(kv: Faults, sig, code):
    argv = _bisect_world(kv, sanitizer=False)
    stand_in, build_cmd = _hanging_build_command(kv)
    proc = kv.spawn(*argv, "--build-cmd", build_cmd, env=_git_env(kv))
    pids, exit_code = signal_when_started(proc, stand_in, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    data = kv.run_json("D91-bisect")
    assert data["status"] == "interrupted"
    assert [p.name for p in kv.root.iterdir() if p.name.startswith("kvdiag-bisect-")] == []


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_bisect_with_a_hanging_sanitizer_ends_on_the_first_signal(kv: Faults, sig, code):
    argv = _bisect_world(kv, sanitizer=True)
    env, sanitizer = fake_gpu_toolchain(kv, "hangs")
    python = shlex.quote(sys.executable)
    proc = kv.spawn(*argv, "--build-cmd", f"{python} {{source}}/build.py {{build}}", "--sanitizer", sanitizer,
                    env=_git_env(kv, env))
    pids, exit_code = signal_when_started(proc, sanitizer.parent, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert started_runs(sanitizer.parent) == 1
    assert kv.run_json("D91-bisect")["status"] == "interrupted"
    steps = json.loads((kv.runs("D91-bisect")[-1] / "bisect-steps.json").read_text())
    assert all(s["verdict"] != "not-reproduced" for s in steps)       # an interrupted step is no verdict


# --------------------------------------------------------------------------- verify


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_verify_with_a_hanging_build_command_ends_and_removes_its_worktree(kv: Faults, sig, code):
    source, commits, common = _project_world(kv, sanitizer=False)
    probes = kv.root / "probes"
    probes.mkdir()
    (probes / "fix-uniform.patch").write_text(PROBE)
    stand_in, build_cmd = _hanging_build_command(kv)
    proc = kv.spawn(*common[:2], "verify", "D91", "--source", source, "--probe", "fix-uniform", "--probes", probes,
                    *common[2:], "--build-cmd", build_cmd, env=_git_env(kv))
    pids, exit_code = signal_when_started(proc, stand_in, sig)
    _assert_ended(kv, exit_code, code, sig, pids)
    assert kv.run_json("D91-verify")["status"] == "interrupted"
    listed = subprocess.run(["git", "-C", str(source), "worktree", "list", "--porcelain"], capture_output=True,
                            text=True, env=_git_env(kv), check=True).stdout
    assert [ln for ln in listed.splitlines() if ln.startswith("worktree ")] == [f"worktree {source}"]
    assert [p.name for p in kv.root.iterdir() if p.name.startswith("kvdiag-")] == []
