"""A sanitized step under an MPS daemon: its device errors end the kernel, not the context.

With the tool's default (``--destroy-on-device-error context``) one client's device error is a fatal
GPU error to the MPS server, and by MPS's documentation it reaches every client on the GPU then (an
H100, device session 27: the server logged "handling a fatal GPU error" for the synccheck control).
So `kvdiag run`, `show` and a scan's cases plan such a step with ``kernel`` where a daemon would serve
its processes, and exactly as before where none would. A daemon is staged as CUDA's runtime finds one:
a listening sequenced-packet socket named `control` in the pipe folder (tests/proc/test_mps.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kvdiag.engine.verdict.planning import PlannedStep, kernel_only_under_mps
from kvdiag.records.verdict import Verdict
from kvdiag.registry.entry import Step

PIPE = "CUDA_MPS_PIPE_DIRECTORY"


@pytest.fixture
def daemon():
    """A pipe folder (short: a socket's path is limited) whose `control` socket listens."""
    folder = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp" if Path("/tmp").is_dir() else None))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(str(folder / "control"))
    server.listen(8)
    yield folder
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


def planned(tool: str, *options: str, env: dict[str, str] | None = None) -> PlannedStep:
    step = Step(name="fast", kind="backend-ops", description="", timeout=60, sanitizer=tool,
                sanitizer_options=tuple(options))
    return PlannedStep(step=step, commands=(("test-backend-ops", "-o", "FLASH_ATTN_EXT"),), env=env or {})


@pytest.mark.parametrize("tool", ["memcheck", "synccheck", "initcheck"])
def test_a_tool_whose_findings_end_kernels_gets_kernel_under_a_daemon(daemon, tool):
    got = kernel_only_under_mps(planned(tool), {PIPE: str(daemon)})
    assert got.step.sanitizer_options == ("--destroy-on-device-error", "kernel")
    assert got.commands == planned(tool).commands


def test_the_plan_s_own_variable_names_the_daemon_its_processes_would_meet(daemon, tmp_path):
    got = kernel_only_under_mps(planned("synccheck", env={PIPE: str(daemon)}), {PIPE: str(tmp_path)})
    assert got.step.sanitizer_options[-2:] == ("--destroy-on-device-error", "kernel")
    assert kernel_only_under_mps(planned("synccheck", env={PIPE: str(tmp_path)}), {PIPE: str(daemon)}) \
        == planned("synccheck", env={PIPE: str(tmp_path)})


def test_without_a_daemon_racecheck_or_an_entry_s_own_choice_nothing_changes(daemon, tmp_path):
    assert kernel_only_under_mps(planned("synccheck"), {PIPE: str(tmp_path)}) == planned("synccheck")
    assert kernel_only_under_mps(planned("racecheck"), {PIPE: str(daemon)}) == planned("racecheck")
    for own in (("--destroy-on-device-error", "context"), ("--destroy-on-device-error=context",)):
        assert kernel_only_under_mps(planned("memcheck", *own), {PIPE: str(daemon)}) == planned("memcheck", *own)
    bare = dataclasses.replace(planned("synccheck"), step=dataclasses.replace(planned("x").step, sanitizer=None))
    assert kernel_only_under_mps(bare, {PIPE: str(daemon)}) == bare


def test_run_under_a_daemon_starts_d2_s_synccheck_with_kernel_and_still_confirms(kv, d2, daemon, monkeypatch):
    monkeypatch.setenv(PIPE, str(daemon))
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges"))
    argv = json.loads(r.log("fast-1.cmd.json"))["argv"]
    assert argv[1:3] == ["--tool", "synccheck"]
    assert argv[argv.index("--destroy-on-device-error") + 1] == "kernel"
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert "barrier-divergence at fattn-mma-f16.cuh:1538" in r.outcome.reason


def test_run_without_a_daemon_starts_the_step_as_the_entry_has_it(kv, d2, tmp_path, monkeypatch):
    monkeypatch.setenv(PIPE, str(tmp_path))                 # a folder where nothing listens
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges"))
    assert "--destroy-on-device-error" not in json.loads(r.log("fast-1.cmd.json"))["argv"]
    assert r.outcome.verdict is Verdict.CONFIRMED
