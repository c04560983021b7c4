"""The output pump: kvdiag reads a child's output in chunks, and nothing outside the group holds a run."""

from __future__ import annotations

import json
import os
import signal
import time

from proc_helpers import pid_gone, scenario, wait_until
from kvdiag.proc import logsink
from kvdiag.proc.pump import DRAIN_LIMIT_S, OutputPump
from kvdiag.proc.runner import run_command


def test_output_waiting_in_the_pipe_is_read_in_one_chunk_not_one_call_per_line(log_dir, monkeypatch):
    """A sanitized batch prints hundreds of thousands of lines; sh's readers cost a Python call per line.
    What a child left in its pipe (here 800 lines, under the pipe's 64 KiB) is one feed of the sink.
    (How small the chunks of a live child are depends on who is faster, so that is not counted.)"""
    calls = []
    feed = logsink.LogSink.feed
    monkeypatch.setattr(logsink.LogSink, "feed", lambda self, stream, data: (calls.append((stream, len(data))),
                                                                                feed(self, stream, data))[1])
    lines = b"".join(b"%08d %s\n" % (i, b"x" * 60) for i in range(800))
    read, write = os.pipe()
    os.write(write, lines)
    os.close(write)
    log_dir.mkdir(parents=True, exist_ok=True)
    sink = logsink.LogSink(log_dir, "waiting", False, None)
    pump = OutputPump(sink, {read: "stdout"})
    pump.start()
    pump.join(10)
    sink.close()
    assert not pump.is_alive()
    assert calls == [("stdout", len(lines))]
    assert sink.paths["stdout"].read_bytes() == lines


def test_a_flood_through_a_pty_loses_nothing_read_in_chunks(log_dir):
    n, width = 40_000, 60
    r = run_command(scenario("floods_output.py", n, width), timeout=60, log_dir=log_dir, name="chunks", tty=True)
    assert r.ok
    pad = b"x" * width
    assert r.stdout_path.read_bytes() == b"".join(b"%08d " % i + pad + b"\n" for i in range(n))


def test_on_output_still_sees_every_line_when_they_arrive_in_chunks(log_dir):
    lines: list[tuple[str, str]] = []
    n = 5_000
    r = run_command(scenario("floods_output.py", n, 10), timeout=60, log_dir=log_dir, name="lines",
                    on_output=lambda stream, line: lines.append((stream, line)))
    assert r.ok
    out = [line for stream, line in lines if stream == "stdout"]
    assert out == ["%08d " % i + "x" * 10 for i in range(n)]
    assert [line for stream, line in lines if stream == "stderr"] == ["err %08d" % i for i in range(0, n, 100)]


def test_a_daemon_that_escaped_with_the_output_open_does_not_hold_the_run(log_dir):
    started = time.monotonic()
    r = run_command(scenario("leaves_a_daemon_holding_its_output.py", 60), timeout=60, log_dir=log_dir,
                    name="daemon", tty=True)
    took = time.monotonic() - started
    text = r.stdout_path.read_text()
    daemon = int(text.split()[1])
    try:
        assert r.ok and "parent done" in text
        assert took < 60 and took < DRAIN_LIMIT_S + 20, took
    finally:
        try:
            os.kill(daemon, signal.SIGKILL)
            os.waitpid(daemon, 0)       # its parent exited: kvdiag, the subreaper, is its parent now
        except (ProcessLookupError, ChildProcessError):
            pass
        assert wait_until(lambda: pid_gone(daemon), 10)


def test_a_sink_that_fails_does_not_stop_the_reading(log_dir, monkeypatch):
    """A feed that raises is counted, and the child is still read to its end (else it would block on
    a full pipe until its timeout)."""
    feed = logsink.LogSink.feed
    seen = []

    def flaky(self, stream, data):
        seen.append(len(data))
        if len(seen) == 1:
            raise RuntimeError("a broken sink")
        feed(self, stream, data)
    monkeypatch.setattr(logsink.LogSink, "feed", flaky)
    r = run_command(scenario("floods_output.py", 20_000, 60), timeout=30, log_dir=log_dir, name="flaky")
    assert r.ok and not r.timed_out
    assert len(seen) > 1
    assert cmd_json_result(log_dir, "flaky")["log_write_errors"] == 1


def cmd_json_result(log_dir, name: str) -> dict:
    return json.loads((log_dir / f"{name}.cmd.json").read_text())["result"]
