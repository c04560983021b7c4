"""k of N with its interval (kvdiag.records.rates), on the verdict and in a before/after comparison.

The reference values are the textbook ones: Wilson's interval for 0/10 is [0, 0.2775], for 1/3
[0.0615, 0.7923]; Fisher's exact two-sided p for 3/10 against 0/10 is 0.2105 (4/19).
"""

from __future__ import annotations

import pytest

from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.engine.verify.session import compare_rates
from kvdiag.records.rates import Rate, fisher_exact_two_sided, wilson_interval
from kvdiag.report.templating import render


def attempts(*verdicts: Verdict) -> tuple[Attempt, ...]:
    return tuple(Attempt(step="server-mtp", index=i + 1, verdict=v, reason=v.value, evidence=Evidence())
                 for i, v in enumerate(verdicts))


@pytest.mark.parametrize("k, n, low, high", [(0, 10, 0.0, 0.2775), (1, 3, 0.0615, 0.7923), (10, 10, 0.7225, 1.0),
                                             (5, 10, 0.2366, 0.7634)])
def test_wilson_interval_matches_the_reference_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=1e-4)


def test_an_interval_of_no_runs_is_everything_and_a_bad_k_is_refused():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


def test_fisher_exact_matches_the_reference_values():
    assert fisher_exact_two_sided(3, 10, 0, 10) == pytest.approx(4 / 19)
    assert fisher_exact_two_sided(0, 10, 0, 10) == 1.0
    assert fisher_exact_two_sided(10, 10, 0, 10) == pytest.approx(2 / 184756)


def test_ten_clean_runs_say_what_rate_they_exclude():
    rate = Rate(0, 10)
    assert rate.text == "0/10 runs (95% Wilson interval 0%–28%)"
    assert rate.excludes == "a rate above 28%"
    assert Rate(1, 3).excludes == "a rate above 79% and a rate below 6.1%"


def test_a_multi_run_outcome_carries_its_rate_over_the_judged_runs_only():
    o = Outcome(entry_id="D3", verdict=Verdict.CONFIRMED, reason="r",
                attempts=attempts(Verdict.NOT_REPRODUCED, Verdict.CONFIRMED, Verdict.INCONCLUSIVE))
    assert (o.rate.k, o.rate.n) == (1, 2)
    assert o.to_dict()["rate"] == {"k": 1, "n": 2, "low": pytest.approx(0.0945, abs=1e-3),
                                   "high": pytest.approx(0.9055, abs=1e-3), "method": "wilson-95"}
    assert Outcome.from_dict(o.to_dict()).rate == o.rate
    single = Outcome(entry_id="D2", verdict=Verdict.CONFIRMED, reason="r", attempts=attempts(Verdict.CONFIRMED))
    assert single.rate is None and "rate" not in single.to_dict()


def test_the_verdict_text_shows_the_interval(tmp_path):
    o = Outcome(entry_id="D3", verdict=Verdict.NOT_REPRODUCED, reason="clean (all 10 runs)",
                attempts=attempts(*[Verdict.NOT_REPRODUCED] * 10))
    text = render("verdict.txt.j2", o=o, title="t", run_dir=tmp_path, command=None)
    assert "  runs: 0/10 runs (95% Wilson interval 0%–28%): the runs rule out a rate above 28%" in text


def test_before_and_after_rates_are_compared_with_fishers_test():
    before = Outcome(entry_id="D3", verdict=Verdict.CONFIRMED, reason="r",
                     attempts=attempts(*[Verdict.CONFIRMED] * 3 + [Verdict.NOT_REPRODUCED] * 7))
    after = Outcome(entry_id="D3", verdict=Verdict.NOT_REPRODUCED, reason="r",
                    attempts=attempts(*[Verdict.NOT_REPRODUCED] * 10))
    cmp = compare_rates(before.rate, after.rate)
    assert cmp.p_value == pytest.approx(4 / 19) and not cmp.differ
    assert "no difference shown" in cmp.text and cmp.to_dict()["test"] == "fisher-exact-two-sided"
    many = compare_rates(Rate(10, 10), Rate(0, 10))
    assert many.differ and "the rates differ" in many.text
    assert compare_rates(None, after.rate) is None
