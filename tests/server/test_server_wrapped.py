"""A server with a sanitizer in front: stop the server first so the launcher can finish its report."""

from __future__ import annotations

import sys

from server_helpers import SERVERS, pid_gone, pids_in, server_step, standin

from kvdiag.server import run_server_attempt


def launched(tmp_path, wrapped: bool):
    log = tmp_path / f"sanitizer-{wrapped}.log"
    argv = [sys.executable, str(SERVERS / "sanitizer_like_launcher.py"), "--log-file", str(log), "--",
            *standin("completes_with_draft_stats")]
    result, outcome = run_server_attempt(server_step(), argv, None, tmp_path / "logs", f"wrapped-{wrapped}",
                                         health_timeout=8.0, request_timeout=8.0, stop_grace=3.0, wrapped=wrapped)
    return result, outcome, log


def test_a_wrapped_server_is_stopped_through_its_target_and_the_summary_is_written(tmp_path):
    result, outcome, log = launched(tmp_path, wrapped=True)
    assert outcome.kind == "completed"
    assert "ERROR SUMMARY: 0 errors" in log.read_text()
    assert outcome.stopped_with == "SIGTERM to the target"
    for pid in pids_in(result.stdout_text()).values():
        assert pid_gone(pid)


def test_signalling_the_whole_group_loses_the_summary(tmp_path):
    """Why the executor needs to know: the group-wide SIGTERM kills the launcher first."""
    result, outcome, log = launched(tmp_path, wrapped=False)
    assert outcome.kind == "completed"
    assert not log.exists() or "ERROR SUMMARY" not in log.read_text()
    for pid in pids_in(result.stdout_text()).values():
        assert pid_gone(pid)
