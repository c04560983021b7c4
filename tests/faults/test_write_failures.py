"""Issue 28: a write the OS refuses never passes in silence.

With KVDIAG_HOME on a 300 KB tmpfs, a run whose step printed 10 MB gave its verdict
from a log cut at 112 KiB, with no word of the cut anywhere. Each scenario stages the
refusal for real, in a kvdiag process of its own: a full tmpfs (ENOSPC; root only, where
mounting is allowed) or a file-size limit (RLIMIT_FSIZE: EFBIG, on any machine), and
asserts: the run is finished and marked `log_truncated` with the bytes lost (run.json
still valid against its schema), a verdict that rests on the cut log is inconclusive and
says so, a verdict that does not (an exit signal) stands with a warning, every log is a
clean prefix of the output, and the disk keeps room for the run's record.
"""

from __future__ import annotations

import json
import time

import pytest

from faults_helpers import Faults, small_tmpfs, spawn_with_file_limit, unmount

TEN_MB = 10 * 1024 * 1024


def _schema_valid(data: dict) -> None:
    import jsonschema
    from referencing import Registry, Resource

    from kvdiag.report.schemas import RUN_SCHEMA, SWEEP_SCHEMA, load_schema

    sweep, run = load_schema(SWEEP_SCHEMA), load_schema(RUN_SCHEMA)
    registry = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in (sweep, run)])
    jsonschema.Draft202012Validator(run, registry=registry).validate(data)


def _wait(proc) -> int:
    try:
        return proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _assert_cut(kv: Faults, why: str) -> dict:
    data = kv.run_json("D12")
    _schema_valid(data)
    assert data["status"] == "finished"
    cut = data["log_truncated"]
    assert cut["error"] == why and cut["bytes_lost"] > TEN_MB - 400_000
    run = kv.runs("D12")[-1]
    for name, lost in cut["logs"].items():
        kept = (run / name).read_bytes()
        assert set(kept) <= set(b"x\n") and kept.startswith(b"x" * 1023 + b"\n")   # a prefix, no hole
        assert len(kept) + lost >= TEN_MB
    commands = data["outcome"]["attempts"][0]["commands"]
    assert commands[0]["log_error"] == why and commands[0]["log_lost"]
    return data


@pytest.mark.parametrize("stage", ["full-tmpfs", "file-size-limit"])
def test_a_cut_log_makes_the_verdict_inconclusive_and_says_so(kv: Faults, stage):
    build = kv.build("prints_ten_megabytes.sh")
    if stage == "full-tmpfs":
        if not small_tmpfs(kv.home):
            pytest.skip("mounting a tmpfs is not allowed here (the file-size limit stages the same refusal)")
        try:
            proc = kv.spawn("run", "D12", "--build", build, "--no-staleness")
            code = _wait(proc)
            why = "No space left on device"
            data = _assert_cut(kv, why)
        finally:
            unmount(kv.home)
    else:
        proc = spawn_with_file_limit(kv, 300_000, "run", "D12", "--build", build, "--no-staleness")
        code = _wait(proc)
        why = "File too large"
        data = _assert_cut(kv, why)
    out = kv.out_path.read_text()
    assert code == 4, kv.stderr_of_spawned()
    assert out.startswith("D12 INCONCLUSIVE")
    assert f"the log was cut: {data['log_truncated']['bytes_lost']} bytes of output never reached " \
           f"logs/throw-probe-1.combined.log ({why})" in out
    assert data["outcome"]["verdict"] == "inconclusive" and data["outcome"]["reason"].startswith("the log was cut")
    assert "never reached the logs" in " ".join(data["outcome"]["warnings"])


def test_a_verdict_that_does_not_rest_on_the_log_stands_and_names_the_cut(kv: Faults):
    """D12's signature is the exit signal (SIGILL), not a line: confirmed from the status, the cut in a warning."""
    build = kv.build("prints_ten_megabytes_then_traps.sh")
    proc = spawn_with_file_limit(kv, 300_000, "run", "D12", "--build", build, "--no-staleness")
    code = _wait(proc)
    out = kv.out_path.read_text()
    assert code == 1, kv.stderr_of_spawned()
    assert out.startswith("D12 CONFIRMED")
    assert "bytes of output never reached the logs (File too large)" in out
    data = _assert_cut(kv, "File too large")
    assert data["outcome"]["verdict"] == "confirmed"


def test_a_full_disk_keeps_room_for_the_runs_record(kv: Faults):
    """On a disk that is really full, the cut logs give back the room run.json and cmd.json need."""
    if not small_tmpfs(kv.home):
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        build = kv.build("prints_ten_megabytes.sh")
        started = time.monotonic()
        code = _wait(kv.spawn("run", "D12", "--build", build, "--no-staleness"))
        assert code == 4 and time.monotonic() - started < 120, kv.stderr_of_spawned()
        run = kv.runs("D12")[-1]
        cmd = json.loads((run / "logs" / "throw-probe-1.cmd.json").read_text())
        assert cmd["result"]["log_lost"] and cmd["result"]["log_error"] == "No space left on device"
        assert "Traceback" not in kv.stderr_of_spawned()
    finally:
        unmount(kv.home)
