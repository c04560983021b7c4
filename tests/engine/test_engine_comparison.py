"""A step's comparison arm (`compare_with`, kvdiag.engine.verdict.comparison): run once after the judged step,
quoted beside its verdict, never judged itself (D5's q8_0 arm is the registry's use)."""

from __future__ import annotations

import pytest

from engine_helpers import BACKEND_OPS_ARGV
from kvdiag.records.verdict import Verdict
from kvdiag.errors import UsageError
from kvdiag.registry.loader import load_registry

ENTRY = '''
[requires]
binaries = ["test-backend-ops"]

[[repro]]
name = "judged"
kind = "backend-ops"
default = true
description = "The judged arm: the FA cases, plainly."
argv = {argv}
timeout = 60
runs = 2
vars = {{ op = "FLASH_ATTN_EXT", backend = "CUDA0", params = "hsk=256" }}
compare_with = "control"

[[repro]]
name = "control"
kind = "command"
description = "The comparison arm: the same program, its device count quoted."
argv = {argv}
timeout = 60
vars = {{ op = "FLASH_ATTN_EXT", backend = "CUDA0", params = "hsk=128" }}
expect = {expect}

[[signature]]
type = "case"
step = "judged"
status = "FAIL"
'''


def entry_with(kv, entry_id: str, expect: str = r"['Testing \d+ devices']"):
    return kv.entry(entry_id, ENTRY.format(argv=BACKEND_OPS_ARGV, expect=expect))


def test_the_arm_runs_once_after_the_judged_runs_and_is_quoted_beside_the_verdict(kv):
    r = kv.run(entry_with(kv, "D950"), kv.target_for("backend_ops_all_ok", sanitizer=None))
    o = r.outcome
    assert o.verdict is Verdict.NOT_REPRODUCED and o.n == 2          # the judged step's verdict and runs
    assert o.reason.endswith("; comparison arm control: 'Testing 2 devices'")
    assert o.extra["comparison"] == {"step": "control", "seen": ["'Testing 2 devices'"], "missing": [],
                                     "exit": "exit 0", "logs": ["logs/control-1.combined.log"]}
    assert r.run_json["outcome"]["extra"]["comparison"]["step"] == "control"
    assert {"judged-1.combined.log", "judged-2.combined.log", "control-1.combined.log"} <= r.log_names()
    assert "control-2.combined.log" not in r.log_names()


def test_an_arm_that_does_not_print_its_figure_says_so(kv):
    r = kv.run(entry_with(kv, "D951", expect="'host compute buffer size = '"),
               kv.target_for("backend_ops_all_ok", sanitizer=None))
    assert r.outcome.verdict is Verdict.NOT_REPRODUCED
    assert r.outcome.reason.endswith("; comparison arm control: /host compute buffer size = / not seen (exit 0)")


def test_no_arm_runs_when_the_judged_step_did_not_apply(kv):
    r = kv.run(entry_with(kv, "D952"), kv.target_for("backend_ops_not_supported", sanitizer=None))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert "comparison" not in r.outcome.extra and "comparison arm" not in r.outcome.reason
    assert "control-1.combined.log" not in r.log_names()


def test_asking_for_the_arm_alone_names_the_step_it_belongs_to(kv):
    entry = entry_with(kv, "D953")
    with pytest.raises(UsageError, match=r"comparison arm of step 'judged' .*kvdiag run D953 --step judged"):
        kv.run(entry, kv.target_for("backend_ops_all_ok", sanitizer=None), step="control")


def test_lint_refuses_an_arm_that_is_missing_or_has_a_signature(tmp_path):
    from engine_helpers import ENTRY_TEMPLATE

    body = ENTRY.format(argv=BACKEND_OPS_ARGV, expect="'x'")
    signed = body.replace('step = "judged"\nstatus', 'step = "control"\nstatus')
    missing = body.replace('compare_with = "control"', 'compare_with = "nowhere"')
    for entry_id, text in (("D954", signed), ("D955", missing)):
        (tmp_path / f"{entry_id}.md").write_text(ENTRY_TEMPLATE.format(id=entry_id, body=text.strip()))
    problems = {p.file.split("/")[-1]: str(p) for p in load_registry(tmp_path).problems}
    assert "has a signature: a comparison arm is measured, not judged" in problems["D954.md"]
    assert "no other repro step named 'nowhere'" in problems["D955.md"]
