"""A sanitized step under an MPS daemon: its device errors end the kernel, not the context.

With the tool's default (``--destroy-on-device-error context``) one client's device error is a fatal
GPU error to the MPS server, and by MPS's documentation it reaches every client on the GPU then (an
H100, device session 27: the server logged "handling a fatal GPU error" for the synccheck control).
So `kvdiag run`, `show` and a scan's cases start such a step with ``kernel`` where a daemon would serve
its processes, and exactly as before where none would (kvdiag.engine.verdict.processes.sanitizer_invocation).
A daemon is staged as CUDA's runtime finds one: a listening sequenced-packet socket named `control` in
the pipe folder (tests/proc/test_mps.py).
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kvdiag.engine.verdict.processes import sanitizer_invocation
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


def step(tool: str | None, *options: str) -> Step:
    return Step(name="fast", kind="backend-ops", description="", timeout=60, sanitizer=tool,
                sanitizer_options=tuple(options))


def argv(tool: str | None, *options: str, env: dict[str, str] | None = None, environ: dict[str, str]) -> list[str]:
    """What the step's processes would be started with: the sanitizer's argv in front of the program's."""
    invocation = sanitizer_invocation(step(tool, *options), env, environ)
    program = ["test-backend-ops", "-o", "FLASH_ATTN_EXT"]
    return program if invocation is None else list(invocation.argv(Path("compute-sanitizer"), Path("s.log"), program))


def destroy(command: list[str]) -> str | None:
    flag = "--destroy-on-device-error"
    return command[command.index(flag) + 1] if flag in command else None


@pytest.mark.parametrize("tool", ["memcheck", "synccheck", "initcheck"])
def test_a_tool_whose_findings_end_kernels_gets_kernel_under_a_daemon(daemon, tool):
    command = argv(tool, environ={PIPE: str(daemon)})
    assert command[1:3] == ["--tool", tool] and destroy(command) == "kernel"
    assert command[-3:] == ["test-backend-ops", "-o", "FLASH_ATTN_EXT"]


def test_the_plan_s_own_variable_names_the_daemon_its_processes_would_meet(daemon, tmp_path):
    assert destroy(argv("synccheck", env={PIPE: str(daemon)}, environ={PIPE: str(tmp_path)})) == "kernel"
    assert destroy(argv("synccheck", env={PIPE: str(tmp_path)}, environ={PIPE: str(daemon)})) is None


def test_without_a_daemon_racecheck_or_an_entry_s_own_choice_nothing_changes(daemon, tmp_path):
    assert destroy(argv("synccheck", environ={PIPE: str(tmp_path)})) is None
    assert destroy(argv("racecheck", environ={PIPE: str(daemon)})) is None
    assert destroy(argv("memcheck", "--destroy-on-device-error", "context", environ={PIPE: str(daemon)})) == "context"
    own = argv("memcheck", "--destroy-on-device-error=context", environ={PIPE: str(daemon)})
    assert "--destroy-on-device-error=context" in own and destroy(own) is None
    assert argv(None, environ={PIPE: str(daemon)}) == ["test-backend-ops", "-o", "FLASH_ATTN_EXT"]


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


def test_show_prints_the_command_run_would_start(kv, d2, daemon, monkeypatch):
    from kvdiag.engine.verdict.show import plan_commands_for_display

    build = kv.build("backend_ops_d2_diverges")
    monkeypatch.setenv(PIPE, str(daemon))
    shown = plan_commands_for_display(d2, build)["commands"][0]
    assert shown["step"] == "fast" and destroy(shown["argv"][0]) == "kernel"
    assert "--destroy-on-device-error kernel" in shown["shell"]
