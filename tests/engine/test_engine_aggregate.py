"""k-of-N aggregation of attempts (kvdiag.records.verdict.aggregate), and the exit code of each verdict."""

from __future__ import annotations

import pytest

from kvdiag.records.verdict import Attempt, Evidence, Verdict, aggregate


def attempt(index: int, verdict: Verdict, reason: str = "") -> Attempt:
    return Attempt(step="fast", index=index, verdict=verdict, reason=reason or verdict.value, evidence=Evidence())


def test_one_confirmation_confirms():
    verdict, reason = aggregate([attempt(1, Verdict.NOT_REPRODUCED), attempt(2, Verdict.INCONCLUSIVE),
                                 attempt(3, Verdict.CONFIRMED, "2048 barrier errors")])
    assert verdict is Verdict.CONFIRMED
    assert reason == "1/3 runs matched the signature: 2048 barrier errors"


@pytest.mark.parametrize("only", [Verdict.NOT_REPRODUCED, Verdict.NOT_APPLICABLE, Verdict.INCONCLUSIVE])
def test_agreeing_runs_keep_their_verdict(only):
    verdict, reason = aggregate([attempt(i, only, "same") for i in (1, 2, 3)])
    assert verdict is only and reason == "same (all 3 runs)"


def test_disagreeing_runs_are_inconclusive_naming_the_odd_run():
    verdict, reason = aggregate([attempt(1, Verdict.NOT_REPRODUCED), attempt(2, Verdict.NOT_APPLICABLE, "0 cases"),
                                 attempt(3, Verdict.NOT_REPRODUCED)])
    assert verdict is Verdict.INCONCLUSIVE
    assert reason == "runs disagree; run 2 was not-applicable: 0 cases"


def test_no_attempt_is_an_error():
    assert aggregate([])[0] is Verdict.ERROR


@pytest.mark.parametrize("verdict,code", [
    (Verdict.CONFIRMED, 1), (Verdict.NOT_REPRODUCED, 0), (Verdict.NOT_APPLICABLE, 2),
    (Verdict.SKIPPED, 3), (Verdict.INCONCLUSIVE, 4), (Verdict.ERROR, 70),
])
def test_exit_codes_are_distinct_per_verdict(verdict, code):
    assert int(verdict.exit_code) == code
