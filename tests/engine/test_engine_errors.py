"""kvdiag's own failures: an `error` verdict recorded in the run, and one line from the CLI."""

from __future__ import annotations

import kvdiag.engine.verdict.attempt as attempt_stage
import kvdiag.engine.verdict.execute as execute
from kvdiag.cli import main
from kvdiag.records.verdict import Verdict
from kvdiag.exitcodes import ExitCode


def test_a_crash_while_judging_is_an_error_verdict_and_the_run_is_finished(kv, d2, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("judge exploded")

    monkeypatch.setattr(attempt_stage, "judge_attempt", broken)
    result = kv.run(d2, kv.target_for("backend_ops_all_ok"))
    assert result.outcome.verdict is Verdict.ERROR
    assert "judge exploded" in result.outcome.reason
    assert result.run_json["status"] == "finished"
    assert result.run_json["outcome"]["verdict"] == "error"
    assert "RuntimeError: judge exploded" in (result.run_dir.path / "error.txt").read_text()


def test_an_unexpected_exception_in_a_command_is_one_line_and_exit_70(isolated, monkeypatch, capsys):
    import kvdiag.registry.loader as loader

    def broken(root=None):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(loader, "load_registry", broken)
    monkeypatch.setattr("kvdiag.cli.load_registry", broken)
    assert main(["list"]) == int(ExitCode.HARNESS)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal failure (ZeroDivisionError: boom)" in err[0]
    assert "Traceback" not in err[0] and "traceback saved to" in err[0]


def test_an_interrupt_after_a_confirmed_run_keeps_the_confirmation(kv, monkeypatch):
    entry = kv.entry("D71", """
        [requires]
        binaries = ["test-backend-ops"]

        [[repro]]
        name = "fast"
        kind = "backend-ops"
        description = "flaky"
        argv = ["{{ bin['test-backend-ops'] }}", "test", "-o", "{{ op }}", "-p", "{{ params }}"]
        timeout = 60
        runs = 3
        vars = { op = "FLASH_ATTN_EXT", params = "hsk=256" }

        [[signature]]
        type = "case"
        status = "OK"
        """)
    calls = {"n": 0}
    real = execute.attempt_step

    def second_is_interrupted(*args, **kwargs):
        calls["n"] += 1
        attempt = real(*args, **kwargs)
        if calls["n"] == 2:
            raise execute.AttemptInterrupted(attempt)
        return attempt

    monkeypatch.setattr(execute, "attempt_step", second_is_interrupted)
    target = kv.target_for("backend_ops_all_ok")
    try:
        kv.run(entry, target)
    except execute.RunInterrupted as exc:
        outcome = exc.outcome
    else:
        raise AssertionError("the run was not interrupted")
    assert outcome.verdict is Verdict.CONFIRMED
    assert "interrupted during run 2 of 3" in outcome.reason
    assert outcome.extra["interrupted"] is True
