"""Inconclusive paths: a different abort, a different finding, a failing case, a hang (timeout),
a sanitizer that did not finish or failed itself, a failed control, and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from engine_helpers import (
    ALLOWED, D2_CASE, EARLIER_CASE, EARLIER_CASE_LINE, REFUSED, REPO, SCENARIO_BUILDS, d2_like, pid_gone, wait_until,
)
from kvdiag.records.verdict import Verdict


def test_other_abort_is_inconclusive_naming_the_abort_and_the_case(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_other_abort"))
    o, ev = r.outcome, r.evidence
    assert o.verdict is Verdict.INCONCLUSIVE and o.verdict is not Verdict.CONFIRMED
    assert o.reason.startswith("a different failure: ")
    assert "(CUDA error: out of memory)" in o.reason
    assert f"while running FLASH_ATTN_EXT({D2_CASE})" in o.reason
    assert ev.running_case == f"FLASH_ATTN_EXT({D2_CASE})"
    assert [a["kind"] for a in ev.aborts] == ["cuda-error", "ggml-abort"]
    assert ev.aborts[1]["file"] == "ggml-cuda.cu" and ev.aborts[1]["line"] == 96
    assert ev.error_count == 0 and not ev.matched
    assert ev.unmatched and "0 matching finding(s) printed" in ev.unmatched[0]
    assert r.gate_calls == []
    assert "CUDA error: out of memory" in r.log("fast-1.combined.log")
    assert r.run_json["outcome"]["verdict"] == "inconclusive"


def test_abort_after_unsupported_cases_is_not_hidden_as_not_applicable(kv, d2):
    """Only "not supported" lines were printed, but the process then died in a case it never
    got to print (current ggml prints a case after it ran): that is a failure to show."""
    r = kv.run(d2, kv.target_for("backend_ops_unsupported_then_abort"))
    o = r.outcome
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.reason.startswith("a different failure: ")
    assert "(CUDA error: out of memory)" in o.reason
    assert f"while running the case after FLASH_ATTN_EXT({EARLIER_CASE}) (the last one that finished)" in o.reason
    assert r.evidence.cases_not_supported == 1


def test_other_sanitizer_finding_is_inconclusive(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_other_finding"))
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason == "a different sanitizer finding: 4 error(s) at fattn-vec.cuh:211"
    assert r.evidence.sites[0]["site"] == "fattn-vec.cuh:211"
    assert r.gate_calls == []


def test_failing_case_is_not_d2(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_case_fail"))
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason.startswith("a different failure: exit 1")
    assert r.evidence.cases_failed == 1
    assert r.evidence.case_metrics[0]["metrics"][0]["value"] == 1.712345678


def test_failed_control_makes_a_clean_run_inconclusive(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_all_ok"), gate=REFUSED)
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason == f"the signature did not match, but {REFUSED.reason}"
    assert r.gate_calls == ["synccheck"]
    assert r.evidence.error_count == 0 and r.evidence.cases_executed == 1


def test_sanitizer_without_summary_proves_nothing(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_all_ok", sanitizer="no-summary"),
               gate=ALLOWED)
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert "did not finish its report (no summary line)" in r.outcome.reason
    assert "silence proves nothing" in r.outcome.reason
    assert r.evidence.exit == "killed by SIGKILL (9)"
    assert r.evidence.cases_executed == 1          # the program itself ran fine
    assert r.gate_calls == []
    assert "ERROR SUMMARY" not in r.log("fast-1.sanitizer.log")


def test_sanitizer_tool_failure_is_inconclusive(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_all_ok", sanitizer="tool-error"),
               gate=ALLOWED)
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason.startswith("compute-sanitizer reported its own failure: Error: Device not supported")
    assert r.evidence.error_count == 0           # its "0 errors" is not a clean result
    assert r.gate_calls == []


def test_hang_times_out_kills_the_tree_and_keeps_the_partial_log(kv):
    # no sanitizer in front: one interpreter start before the hang, so a short timeout
    # is still far more than the program needs to print its lines and fork
    entry = kv.entry("D910", d2_like(timeout=3, sanitizer=False))
    build = kv.build("backend_ops_hangs")
    r = kv.run(entry, kv.target(build, sanitizer=None), gate=ALLOWED)
    o = r.outcome

    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.reason.startswith("timed out after 3.0 s (process group killed)")
    assert f"while running FLASH_ATTN_EXT({D2_CASE})" in o.reason
    assert r.evidence.running_case == f"FLASH_ATTN_EXT({D2_CASE})"
    assert r.gate_calls == []
    # the whole tree is gone: the program and its own child
    grandchild = int((build / "grandchild.pid").read_text())
    assert wait_until(lambda: pid_gone(grandchild), 5)
    command = r.attempt.commands[0]
    assert command["timed_out"] is True and command["survivors"] == []
    cmd_json = json.loads(r.log("fast-1.cmd.json"))
    assert cmd_json["result"]["group_killed"] is True
    # the partial log is kept, and named in the recorded outcome
    assert command["combined_path"] == "logs/fast-1.combined.log"
    combined = r.log("fast-1.combined.log")
    assert EARLIER_CASE_LINE in combined
    assert f"FLASH_ATTN_EXT({D2_CASE}): " in combined
    data = r.run_json
    assert data["status"] == "finished" and data["outcome"]["verdict"] == "inconclusive"


def test_ctrl_c_records_an_interrupted_run(kv):
    """run_entry in a child process; SIGINT once the first case line is in the streamed log."""
    entry = kv.entry("D911", d2_like(timeout=120, requires="gpu = true"))
    build = kv.build("backend_ops_hangs")
    sanitizer = kv.sanitizer()
    run_dir = kv.root / "interrupted-run"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, str(SCENARIO_BUILDS / "run_entry_driver.py"), str(build), str(sanitizer),
         str(kv.registry_dir), entry.id, str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=kv.root)
    combined = run_dir / "logs" / "fast-1.combined.log"
    try:
        def case_line_streamed() -> bool:
            return (combined.exists() and EARLIER_CASE_LINE in combined.read_text()
                    and (build / "grandchild.pid").exists())

        wait_until(lambda: proc.poll() is not None or case_line_streamed(), 30)
        assert case_line_streamed(), (proc.stderr.read().decode() if proc.poll() is not None
                                      else "no case line in 30 s")
        grandchild = int((build / "grandchild.pid").read_text())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    printed = json.loads(out.decode().strip().splitlines()[-1])
    assert printed["verdict"] == "inconclusive" and printed["extra"] == {"interrupted": True}

    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "interrupted"
    outcome = data["outcome"]
    assert outcome["verdict"] == "inconclusive"
    assert outcome["reason"] == "interrupted by the user (Ctrl-C); partial logs kept"
    assert outcome["attempts"][0]["reason"].startswith("interrupted")
    assert outcome["attempts"][0]["commands"][0]["interrupted"] is True
    text = combined.read_text()
    assert EARLIER_CASE_LINE in text and f"FLASH_ATTN_EXT({D2_CASE}): " in text
    assert wait_until(lambda: pid_gone(grandchild), 10)
