"""The controls cache and the gate the engine asks before saying not-reproduced."""

from __future__ import annotations

import json

import pytest

from controls_helpers import make_env
from kvdiag.controls.cache import (
    CONTROLS_FILE,
    ControlRecord,
    load_control,
    not_reproduced_gate,
    store_record,
)
from kvdiag.controls.doctor import ControlResult, DoctorReport
from kvdiag.controls.cache import store_controls

KEY = "0123456789abcdef"


def _record(tool="synccheck", passed=True, **kw) -> ControlRecord:
    defaults = dict(env_key=KEY, tool=tool, passed=passed, date="2026-11-29T16:40:00+00:00",
                    detail="d", launcher="cupy", versions={"nvcc": "13.0.88"},
                    positive_detected=passed, positive_detail="barrier-divergence at barrier_divergent.cu:27, 32 errors",
                    negative_clean=True, negative_detail="0 errors")
    defaults.update(kw)
    return ControlRecord(**defaults)


def test_no_record_is_not_allowed(tmp_path):
    gate = not_reproduced_gate(tmp_path, KEY, "synccheck")
    assert not gate.allowed
    assert gate.reason == "synccheck's control has not run on this machine: run `kvdiag doctor`"


def test_passed_record_is_allowed(tmp_path):
    store_record(tmp_path, _record())
    gate = not_reproduced_gate(tmp_path, KEY, "synccheck")
    assert gate.allowed
    assert gate.reason.startswith("synccheck control passed on this machine on 2026-11-29")


def test_failed_positive_is_not_allowed(tmp_path):
    store_record(tmp_path, _record(passed=False, positive_detected=False,
                                   positive_detail="expected barrier-divergence at barrier_divergent.cu:27; "
                                                   "the tool reported 0 errors"))
    gate = not_reproduced_gate(tmp_path, KEY, "synccheck")
    assert not gate.allowed
    assert gate.reason.startswith("synccheck's positive control was not detected on this machine: expected")


def test_dirty_negative_is_not_allowed(tmp_path):
    store_record(tmp_path, _record(tool="memcheck", passed=False, positive_detected=True, negative_clean=False,
                                   negative_detail="1 error on the fixed twin"))
    gate = not_reproduced_gate(tmp_path, KEY, "memcheck")
    assert not gate.allowed and "negative control was not clean" in gate.reason


def test_a_record_for_another_machine_or_tool_does_not_count(tmp_path):
    store_record(tmp_path, _record())
    assert not not_reproduced_gate(tmp_path, "fedcba9876543210", "synccheck").allowed
    assert not not_reproduced_gate(tmp_path, KEY, "racecheck").allowed


def test_step_without_sanitizer_is_allowed(tmp_path):
    gate = not_reproduced_gate(tmp_path, KEY, None)
    assert gate.allowed and "no sanitizer" in gate.reason


def test_records_round_trip_and_keep_each_other(tmp_path):
    store_record(tmp_path, _record("synccheck"))
    store_record(tmp_path, _record("memcheck", passed=False, positive_detected=False))
    store_record(tmp_path, _record("synccheck", date="2026-12-01T00:00:00+00:00"))
    doc = json.loads((tmp_path / CONTROLS_FILE).read_text())
    assert set(doc[KEY]) == {"synccheck", "memcheck"}
    entry = doc[KEY]["synccheck"]
    assert {"passed", "date", "detail", "launcher", "versions"} <= set(entry)
    assert load_control(tmp_path, KEY, "synccheck") == _record("synccheck", date="2026-12-01T00:00:00+00:00")
    assert load_control(tmp_path, KEY, "memcheck").passed is False


def test_a_broken_cache_proves_nothing(tmp_path):
    (tmp_path / CONTROLS_FILE).write_text("{ torn")
    assert load_control(tmp_path, KEY, "synccheck") is None
    assert not not_reproduced_gate(tmp_path, KEY, "synccheck").allowed
    store_record(tmp_path, _record())            # and is replaced on the next store
    assert not_reproduced_gate(tmp_path, KEY, "synccheck").allowed


def test_store_controls_writes_what_ran_not_what_was_cached(tmp_path):
    ran = ControlResult("memcheck", "oob_write", True, "invalid-write at oob_write.cu:15, 2 errors", True,
                        "0 errors", "pycuda", True, 3.2, str(tmp_path / "logs"))
    cached = ControlResult("synccheck", "barrier_divergent", True, "p", True, "n", "cupy", True, 0.0, "",
                           cached_from="2026-11-01T00:00:00+00:00")
    report = DoctorReport(env_key=KEY, date="2026-11-29T17:00:00+00:00", checks=(), controls=(ran, cached),
                          versions={"nvcc": "13.0.88"})
    store_controls(tmp_path, report.records())
    assert load_control(tmp_path, KEY, "synccheck") is None
    rec = load_control(tmp_path, KEY, "memcheck")
    assert rec.passed and rec.launcher == "pycuda" and rec.versions["launcher"] == "pycuda"
    assert rec.versions["nvcc"] == "13.0.88" and rec.date == "2026-11-29T17:00:00+00:00"
    assert not_reproduced_gate(tmp_path, KEY, "memcheck").allowed


@pytest.mark.parametrize("change", [
    {"nvcc": "13.1.12"},               # a new toolkit
    {"driver": "590.10.01"},           # a new driver
    {"sanitizer": "2025.4.0.0"},       # a new compute-sanitizer
    {"runtime": "13.1"},               # a new CUDA runtime
    {"gpu": False},                    # the GPU went away
])
def test_env_key_changes_with_toolkit_driver_sanitizer_or_gpu(tmp_path, change):
    before, after = make_env(), make_env(**change)
    assert before.key() != after.key()
    store_record(tmp_path, _record(env_key=before.key()))
    assert not_reproduced_gate(tmp_path, before.key(), "synccheck").allowed
    gate = not_reproduced_gate(tmp_path, after.key(), "synccheck")
    assert not gate.allowed and "has not run on this machine" in gate.reason


def test_env_key_is_stable_for_the_same_machine():
    assert make_env().key() == make_env().key()
    # Paths and host details are not part of what a control proves.
    assert make_env(sanitizer_path="/a/compute-sanitizer").key() == make_env(sanitizer_path="/b/x").key()
