"""not-reproduced needs matching work executed and the detector's control passed; the `expect`
control of a step without a sanitizer (D12's throw probe) decides between not-reproduced,
confirmed and inconclusive."""

from __future__ import annotations

from engine_helpers import ALLOWED, d2_like
from kvdiag.records.verdict import Verdict


def test_clean_run_with_a_passed_control_is_not_reproduced(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_all_ok"), gate=ALLOWED)
    o, ev = r.outcome, r.evidence
    assert o.verdict is Verdict.NOT_REPRODUCED and o.verdict.exit_code == 0
    assert o.reason.startswith("1 matching case(s) executed (1 OK, 0 FAIL); the signature did not match; "
                               + ALLOWED.reason + "; launch not proven: launches were not listed in this run")
    assert ev.launch_proof.startswith("launch not proven") and ev.launched == ()
    assert r.gate_calls == ["synccheck"]
    assert (ev.error_count, ev.cases_matched, ev.cases_executed) == (0, 1, 1)
    assert ev.unmatched and not ev.matched and not ev.quoted
    assert ev.exit == "exit 0"
    assert "ERROR SUMMARY: 0 errors" in r.log("fast-1.sanitizer.log")
    data = r.run_json
    assert data["status"] == "finished" and data["outcome"]["verdict"] == "not-reproduced"


def test_d2_case_is_invisible_without_the_sanitizer(kv):
    """The diverging build's case prints OK without a sanitizer: a numeric-only entry is not-reproduced."""
    entry = kv.entry("D930", d2_like(sanitizer=False, signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        '''))
    r = kv.run(entry, kv.target_for("backend_ops_d2_diverges"))
    assert r.outcome.verdict is Verdict.NOT_REPRODUCED
    assert r.outcome.reason.startswith("1 matching case(s) executed (1 OK, 0 FAIL); the signature did not match")
    assert "no sanitizer involved" in r.outcome.reason
    assert r.gate_calls == [None]
    assert "fast-1.sanitizer.log" not in r.log_names()


THROW_PROBE = '''
[requires]
binaries = ["test-backend-ops"]

[[repro]]
name = "throw-probe"
kind = "command"
default = true
description = "D12's throw probe: a test file that cannot exist makes test-backend-ops throw."
argv = ["{{ bin['test-backend-ops'] }}", "test", "-b", "CPU", "--test-file", "/nonexistent/kvdiag-throw-probe"]
timeout = 60
expect = 'what\\(\\):\\s+Unable to read test file'

[[signature]]
type = "exit"
signal = "SIGILL"
'''


def test_expect_seen_healthy_throw_is_not_reproduced(kv):
    entry = kv.entry("D931", THROW_PROBE)
    r = kv.run(entry, kv.target_for("backend_ops_throws", sanitizer=None))
    o = r.outcome
    assert o.verdict is Verdict.NOT_REPRODUCED
    assert o.reason.startswith("the expected path ran (seen: 'what():  Unable to read test file'; "
                               "killed by SIGABRT (6)); the signature did not match")
    assert r.evidence.aborts[0]["kind"] == "cpp-exception"
    assert r.evidence.aborts[0]["detail"] == "Unable to read test file"
    assert "what():  Unable to read test file" in r.log("throw-probe-1.stderr.log")
    assert r.gate_calls == [None]


def test_sigill_confirms_through_the_exit_signal(kv):
    entry = kv.entry("D932", THROW_PROBE)
    r = kv.run(entry, kv.target_for("backend_ops_sigill", sanitizer=None))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.outcome.reason.endswith("killed by SIGILL (4)")
    assert r.evidence.quoted == ("killed by SIGILL (4)",)
    assert r.attempt.commands[0]["signal_name"] == "SIGILL"
    assert r.gate_calls == []


def test_neither_throw_nor_trap_is_inconclusive(kv):
    entry = kv.entry("D933", THROW_PROBE)
    r = kv.run(entry, kv.target_for("backend_ops_silent", sanitizer=None))
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason == r"the path did not run as expected: /what\(\):\s+Unable to read test file/ not seen (exit 0)"
    assert r.gate_calls == []
