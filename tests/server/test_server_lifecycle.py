"""The server executor against stand-in servers: one test per outcome, and no orphans after any."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from server_helpers import pid_gone, pids_in, server_step, standin
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound
from kvdiag.server import ServerProcess, free_port, run_server_attempt
from kvdiag.server import lifecycle


def assert_nothing_left(result) -> dict[str, int]:
    pids = pids_in(result.stdout_text())
    assert "standin" in pids, result.stdout_text()
    for name, pid in pids.items():
        assert pid_gone(pid), f"the {name} ({pid}) outlived the attempt"
    assert result.survivors == ()
    return pids


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 1024 <= port <= 65535


def test_slow_health_is_waited_through_then_the_request_completes(attempt):
    result, outcome = attempt("loads_slowly_then_completes", "--load-seconds", "0.6")
    assert outcome.kind == "completed" and result.ok and not result.timed_out
    assert outcome.loading_replies >= 1, "503 Loading model answers must be waited through"
    assert outcome.ready_after_s >= 0.6
    record = outcome.requests[0]
    assert record.status == 200 and record.tokens_predicted == 8 and record.stop_type == "limit"
    assert record.timings["predicted_n"] == 8 and record.draft == {}
    sent = json.loads(result.stderr_text().split("standin got ", 1)[1].splitlines()[0])
    assert sent == {"prompt": "the lighthouse keeper", "n_predict": 8, "temperature": 0.0, "seed": 1234,
                    "cache_prompt": False}
    # the stand-in saw the port kvdiag chose, on loopback only
    assert f"listening on http://127.0.0.1:{outcome.port}" in result.combined_text()
    assert outcome.stopped_with == "SIGTERM" and not outcome.exited_by_itself
    assert result.signal == signal.SIGTERM
    assert "answered 1/1 request(s)" in result.describe()
    assert_nothing_left(result)


def test_logs_use_the_runner_file_names_and_cmd_json_records_the_result(attempt, tmp_path):
    lines: list[tuple[str, str]] = []
    result, outcome = attempt("completes_with_draft_stats", log_name="srv-1",
                              on_output=lambda stream, line: lines.append((stream, line)))
    assert ("stdout", f"standin pid {pids_in(result.stdout_text())['standin']}") in lines
    assert any(stream == "stderr" and line.startswith("standin got ") for stream, line in lines)
    names = {p.name for p in (tmp_path / "logs").iterdir()}
    assert {"srv-1.stdout.log", "srv-1.stderr.log", "srv-1.combined.log", "srv-1.cmd.json",
            "srv-1.requests.jsonl"} <= names
    assert not any(n.endswith(".tmp") for n in names)
    doc = json.loads((tmp_path / "logs" / "srv-1.cmd.json").read_text())
    assert doc["port"] == outcome.port and doc["argv"][-4:] == ["--host", "127.0.0.1", "--port", str(outcome.port)]
    assert doc["result"]["server"]["outcome"] == "completed"
    assert doc["result"]["combined_path"] == "logs/srv-1.combined.log"
    journal = [json.loads(line) for line in (tmp_path / "logs" / "srv-1.requests.jsonl").read_text().splitlines()]
    assert [j["record"]["outcome"] for j in journal] == ["completed"]
    assert json.loads(journal[0]["body"]["text"])["tokens_predicted"] == 8
    # stdout and stderr lines both reach the combined log
    assert "standin pid" in result.combined_text() and "standin got" in result.combined_text()


def test_crash_mid_request_is_connection_dropped_with_the_cuda_error_and_no_orphans(attempt):
    result, outcome = attempt("crashes_mid_request", "--grandchild")
    assert outcome.kind == "connection-dropped" and not result.ok and not result.timed_out
    assert outcome.exited_by_itself
    assert result.signal == signal.SIGABRT and result.returncode is None
    assert outcome.cuda_errors == ("CUDA error: an illegal memory access was encountered",)
    assert any("ggml_backend_cuda_synchronize" in line for line in outcome.last_lines)
    assert "died during request 1/1" in result.describe() and "SIGABRT" in result.describe()
    pids = assert_nothing_left(result)
    assert "grandchild" in pids


def test_hang_is_a_timeout_and_the_whole_group_is_killed(attempt):
    started = time.monotonic()
    result, outcome = attempt("hangs_on_request", "--grandchild", request_timeout=1.0)
    assert time.monotonic() - started < 6.0
    assert outcome.kind == "hang" and result.timed_out and not result.ok
    assert outcome.requests[0].outcome == "hang" and outcome.requests[0].elapsed_s >= 1.0
    assert "no answer within 1.0 s" in result.describe()
    assert not outcome.exited_by_itself and outcome.stopped_with == "SIGTERM"
    assert "grandchild" in assert_nothing_left(result)


def test_a_server_that_ignores_sigterm_is_sigkilled_after_the_grace(attempt):
    result, outcome = attempt("ignores_sigterm", "--grandchild", stop_grace=0.3)
    assert outcome.kind == "completed"
    assert outcome.stopped_with == "SIGKILL" and result.signal == signal.SIGKILL
    assert "grandchild" in assert_nothing_left(result)


def test_completed_requests_carry_timings_and_draft_statistics(attempt):
    step = server_step(requests=2, n_predict=16, ignore_eos=True)
    result, outcome = attempt("completes_with_draft_stats", step=step)
    assert outcome.kind == "completed" and outcome.completed == 2 and outcome.requests_planned == 2
    for record in outcome.requests:
        assert record.draft == {"draft_n": 16, "draft_n_accepted": 12, "acceptance": 0.75}
        assert record.timings["predicted_per_second"] == 200.0
    sent = [json.loads(line.split("standin got ", 1)[1]) for line in result.stderr_text().splitlines()
            if line.startswith("standin got ")]
    assert len(sent) == 2 and all(s["ignore_eos"] is True and s["n_predict"] == 16 for s in sent)
    assert result.to_dict()["server"]["requests"][1]["draft"]["acceptance"] == 0.75


def test_an_http_error_is_request_failed_and_the_server_is_stopped_by_us(attempt):
    step = server_step(requests=3)
    result, outcome = attempt("fails_request", step=step)
    assert outcome.kind == "request-failed" and not result.ok and not result.timed_out
    assert len(outcome.requests) == 1, "the attempt stops at the first failed request"
    assert outcome.requests[0].status == 500
    assert "HTTP 500 (failed to decode the batch)" in result.describe()
    assert not outcome.exited_by_itself and outcome.stopped_with == "SIGTERM"
    assert_nothing_left(result)


def test_a_connection_closed_while_the_server_lives_on_is_request_failed(attempt, monkeypatch):
    monkeypatch.setattr(lifecycle, "EXIT_WAIT_S", 0.5)
    result, outcome = attempt("closes_connection")
    assert outcome.kind == "request-failed"
    assert "closed without an answer while the server kept running" in outcome.detail
    assert not outcome.exited_by_itself
    assert_nothing_left(result)


def test_a_server_that_exits_while_loading_is_server_exited_with_its_status_and_log(attempt):
    result, outcome = attempt("exits_while_loading")
    assert outcome.kind == "server-exited" and not result.ok and not result.timed_out
    assert result.returncode == 1 and result.signal is None and outcome.exited_by_itself
    assert outcome.requests == ()
    assert "exited before it was ready" in result.describe() and "exit 1" in result.describe()
    assert any("error loading model" in line for line in outcome.last_lines)
    assert_nothing_left(result)


def test_a_server_never_ready_is_a_health_timeout(attempt):
    started = time.monotonic()
    result, outcome = attempt("never_ready", health_timeout=0.8)
    assert time.monotonic() - started < 5.0
    assert outcome.kind == "health-timeout" and result.timed_out
    assert outcome.loading_replies >= 1 and outcome.ready_after_s is None
    assert "503 Loading model" in outcome.detail
    assert_nothing_left(result)


def test_the_step_timeout_bounds_the_whole_attempt(attempt):
    started = time.monotonic()
    result, outcome = attempt("hangs_on_request", step=server_step(timeout=1), health_timeout=None,
                              request_timeout=None)
    assert time.monotonic() - started < 6.0
    assert outcome.kind == "hang" and result.timeout_s == 1.0


def test_a_missing_program_is_command_not_found_before_anything_starts(tmp_path):
    with pytest.raises(CommandNotFound):
        run_server_attempt(server_step(), [str(tmp_path / "no-such-llama-server")], None, tmp_path / "logs", "x")
    assert not (tmp_path / "logs" / "x.cmd.json").exists()


def test_cancel_stops_the_server_and_raises_interrupted_with_the_partial_result(attempt):
    cancel = threading.Event()
    timer = threading.Timer(0.8, cancel.set)
    timer.start()
    try:
        with pytest.raises(CommandInterrupted) as info:
            attempt("hangs_on_request", "--grandchild", cancel=cancel)
    finally:
        timer.cancel()
    result = info.value.result
    assert result.interrupted and result.server.kind == "interrupted" and not result.ok
    assert "grandchild" in assert_nothing_left(result)


def test_server_process_is_stopped_by_its_context_manager(tmp_path):
    port = free_port()
    argv = standin("hangs_on_request", "--grandchild", "--host", "127.0.0.1", "--port", str(port))
    with ServerProcess(argv, log_dir=tmp_path, name="cm").start() as server:
        deadline = time.monotonic() + 5
        while "grandchild" not in (tmp_path / "cm.stdout.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.alive
    pids = pids_in((tmp_path / "cm.stdout.log").read_text())
    assert set(pids) == {"standin", "grandchild"}
    assert all(pid_gone(pid) for pid in pids.values())
    assert server.stop().stopped_with == "SIGTERM"      # idempotent: the report of the first stop
