"""A bisection's typed records: the direction's mapping onto git's terms, and files of either age read back."""

from __future__ import annotations

from kvdiag.engine.bisect.bisection import ends_problem
from kvdiag.engine.bisect.step import compile_phases
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.records.bisect import BAD, GOOD, SKIP, BisectRecord, Direction, StepRecord


def test_each_direction_maps_the_two_verdicts_onto_gits_terms_and_skips_the_rest():
    assert Direction.CAUSE.terms == ("good", "bad") and Direction.FIX.terms == ("broken", "fixed")
    assert [Direction.CAUSE.git_answer(v) for v in ("not-reproduced", "confirmed")] == [GOOD, BAD]
    assert [Direction.FIX.git_answer(v) for v in ("confirmed", "not-reproduced")] == [GOOD, BAD]
    for direction in Direction:
        for other in ("inconclusive", "skipped", "not-applicable", "build-failed", "error"):
            assert direction.git_answer(other) == SKIP
    assert Direction.FIX.term_of(GOOD) == "broken" and Direction.FIX.term_of(SKIP) == "skip"


def test_ends_must_bracket_the_change_in_the_direction_asked():
    confirmed = StepRecord("a" * 40, "confirmed", "matched", GOOD)
    clean = StepRecord("b" * 40, "not-reproduced", "clean", BAD)
    assert ends_problem(Direction.FIX, confirmed, clean) is None
    assert ends_problem(Direction.CAUSE, clean, confirmed) is None
    why = ends_problem(Direction.CAUSE, confirmed, clean)
    assert why.startswith("the ends do not bracket a change: a cause bisection needs the old end not-reproduced")
    assert f"old end {'a' * 12} was confirmed (matched)" in why and f"new end {'b' * 12} was not-reproduced" in why
    broken = StepRecord("c" * 40, "build-failed", "build failed (exit 1)", SKIP)
    assert "old end cccccccccccc was build-failed (build failed (exit 1))" in ends_problem(Direction.FIX, broken, clean)


def test_a_bisect_record_of_kvdiag_0_1_reads_as_a_cause_bisection():
    old_format = {"entry": "D2", "good": "1" * 40, "bad": "2" * 40,
                  "first_bad": {"commit": "3" * 40, "subject": "split", "verdict": "confirmed", "reason": "x",
                                "run_dir": None},
                  "parent": None, "candidates": [], "message": "333 is the first bad commit", "run_dir": "/r",
                  "steps": [{"commit": "3" * 40, "verdict": "confirmed", "reason": "x", "exit": 1, "run_dir": None,
                             "duration_s": 2.5, "build_log": None}],
                  "source_status_unchanged": True, "exit_code": 0}
    record = BisectRecord.from_dict(old_format)
    assert record.direction is Direction.CAUSE and (record.old, record.new) == ("1" * 40, "2" * 40)
    assert record.found.commit == "3" * 40 and record.exit_code == 0
    step = record.steps[0]
    assert (step.role, step.duration_s, step.configure_s, step.build_s, step.run_s) == ("step", 2.5, None, None, None)
    again = BisectRecord.from_dict(record.to_dict())
    assert again.to_dict() == record.to_dict()
    assert record.to_dict()["first_bad"]["commit"] == "3" * 40     # the old key is still written, cause only


def test_a_fix_record_round_trips_and_writes_no_cause_keys():
    step = StepRecord("4" * 40, "not-reproduced", "clean", BAD, role="new end", configure_s=7.5, build_s=175.4,
                      run_s=9.0, duration_s=192.3)
    record = BisectRecord("D7", Direction.FIX, "1" * 40, "4" * 40, None, None, ("5" * 40,), (step,), "one of these",
                          "/r", ends_verified=True)
    data = record.to_dict()
    assert "first_bad" not in data and "good" not in data and data["terms"] == ["broken", "fixed"]
    assert data["exit_code"] == 4
    assert BisectRecord.from_dict(data).steps == (step,)


def test_a_compile_steps_time_is_split_into_its_configure_and_object_build():
    commands = ({"argv": ["cmake", "-S", "src", "-B", "b"], "duration_s": 7.5},
                {"argv": ["ninja", "-C", "b", "-t", "query", "x.cu"], "duration_s": 0.02},
                {"argv": ["/usr/bin/ninja", "-C", "b", "-k", "0", "x.cu.o"], "duration_s": 175.4})
    attempt = Attempt(step="compile", index=1, verdict=Verdict.NOT_REPRODUCED, reason="clean", evidence=Evidence(),
                      commands=commands)
    phases = compile_phases((attempt,), 191.4)
    assert phases == {"configure": 7.5, "build": 175.4, "run": 191.4 - 7.5 - 175.4}
    assert compile_phases((), 3.0) == {}
