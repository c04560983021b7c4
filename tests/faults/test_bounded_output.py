"""Issue 43, rows A and B: hostile output is judged in linear time, and `run --timeout` bounds
every child of the run.

Before: one 200 KB line without a blank took 77 s of `kvdiag run` and 76 s of `kvdiag analyze`
(and a 10 MB one, past the parsers, 14 s of copying in the runner's log sink, 4 KB at a time),
10 MB of 1023-character lines 33 s to judge (one test-backend-ops pattern searched with a leading
``\\S+``); `run D1 --timeout 3` with a hung binary cost 304 s, because the case enumeration kept
its own 300 s; a Ctrl-C during a step that had printed 40 MB waited for all of it to be judged.
Every time bound here is relative to ordinary output of the same size, judged in the same test.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from faults_helpers import Faults, assert_all_gone, pids_of
from kvdiag.parse.text import LINE_LIMIT

CUT = f"line(s) longer than {LINE_LIMIT} characters were cut to that length before judging"


def _on_a_gpu_host(kv: Faults, monkeypatch: pytest.MonkeyPatch) -> None:
    env = kv.one_gpu()
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _timed_run(kv: Faults, monkeypatch, build, shape: str, size: int) -> tuple[float, str]:
    monkeypatch.setenv("KVDIAG_TEST_SHAPE", shape)
    monkeypatch.setenv("KVDIAG_TEST_BYTES", str(size))
    started = time.monotonic()
    code, out, err = kv.cli("run", "D1", "--build", build, "--no-staleness", "--format", "json")
    spent = time.monotonic() - started
    assert code in (0, 4), (code, out[-2000:], err[-2000:])
    return spent, json.loads(out)["attempts"][0]["reason"]


@pytest.mark.parametrize("shape, size, cut", [("spaceless", 200_000, 1), ("spaceless", 10_000_000, 1),
                                              ("1023", 2_000_000, 0)],
                         ids=["a-200-kb-line-without-a-blank", "a-10-mb-line-without-a-blank",
                              "2-mb-of-1023-character-lines"])
def test_a_run_judges_hostile_output_within_twice_the_time_of_ordinary_output(kv: Faults, monkeypatch, shape,
                                                                               size, cut):
    _on_a_gpu_host(kv, monkeypatch)
    build = kv.build("prints_hostile_output.sh")
    baseline, _ = _timed_run(kv, monkeypatch, build, "ordinary", size)
    spent, reason = _timed_run(kv, monkeypatch, build, shape, size)
    assert spent <= 2 * baseline + 1.0, f"{spent:.1f} s for {shape}, {baseline:.1f} s for ordinary output"
    assert (f"{cut} {CUT}" in reason) == bool(cut), reason


def test_analyze_reads_a_200_kb_line_at_once_and_says_it_was_cut(kv: Faults):
    ordinary = kv.root / "ordinary.log"
    ordinary.write_text("========= Barrier error detected. Divergent thread(s) in warp\n" * 3300)
    hostile = kv.root / "hostile.log"
    hostile.write_text("========= COMPUTE-SANITIZER\n" + "x" * 200_000 + "\n")
    started = time.monotonic()
    assert kv.cli("analyze", ordinary)[0] == 0
    baseline = time.monotonic() - started
    started = time.monotonic()
    code, out, err = kv.cli("analyze", hostile)
    spent = time.monotonic() - started
    assert code == 0, err
    assert spent <= 2 * baseline + 1.0, f"{spent:.1f} s, {baseline:.1f} s for ordinary lines"
    assert f"1 line(s) longer than {LINE_LIMIT} characters were cut to that length before reading" in out
    code, out, _ = kv.cli("analyze", hostile, "--format", "json")
    assert json.loads(out)["lines_cut"] == 1


def test_run_timeout_bounds_the_enumeration_as_well_as_the_step(kv: Faults, monkeypatch):
    _on_a_gpu_host(kv, monkeypatch)
    build = kv.build("hangs_in_every_mode.sh")
    started = time.monotonic()
    code, out, err = kv.cli("run", "D1", "--build", build, "--no-staleness", "--timeout", "3")
    spent = time.monotonic() - started
    assert code == 4, (out, err)
    assert spent < 20, f"{spent:.0f} s for a run whose every child may take 3 s"
    logs = kv.runs("D1")[-1] / "logs"
    children = sorted(logs.glob("*.cmd.json"))
    assert {p.name for p in children} >= {"fast-1.cmd.json", "enumerate.cmd.json"}, children
    for record in children:
        data = json.loads(record.read_text())
        assert data["timeout_s"] <= 3, (record.name, data["timeout_s"])
    assert_all_gone(pids_of(build))


def test_run_timeout_bounds_the_reading_of_what_the_step_printed(kv: Faults, monkeypatch):
    """A step may print more within its --timeout than can be read within it: past the timeout the
    verdict rests on the output's last megabyte, and says so."""
    _on_a_gpu_host(kv, monkeypatch)
    build = kv.build("prints_hostile_output.sh")
    monkeypatch.setenv("KVDIAG_TEST_SHAPE", "ordinary")
    monkeypatch.setenv("KVDIAG_TEST_BYTES", "150000000")
    started = time.monotonic()
    code, out, err = kv.cli("run", "D1", "--build", build, "--no-staleness", "--timeout", "2", "--format", "json")
    spent = time.monotonic() - started
    assert code in (0, 4), (code, err)
    reason = json.loads(out)["attempts"][0]["reason"]
    assert "only the last 1 MB of each output was judged (reading all of it passed the --timeout of 2 s)" in reason
    assert spent < 2 * 2 + 8, f"{spent:.1f} s for a run whose step and reading may take 2 s each"


def test_ctrl_c_during_a_step_with_40_mb_of_output_ends_within_a_second(kv: Faults):
    build = kv.build("prints_forty_megabytes_then_waits.sh")
    proc = kv.spawn("run", "D1", "--build", build, "--no-staleness", env=kv.one_gpu())
    try:
        pids = pids_of(build, timeout=60)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        spent = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, kv.stderr_of_spawned()
    assert spent < 1.0, f"{spent:.2f} s from Ctrl-C to exit"
    assert_all_gone(pids)
    data = kv.run_json("D1")
    assert data["status"] == "interrupted"
    assert "only the last 1 MB of each output was judged" in data["outcome"]["attempts"][0]["reason"]
