"""Relative signatures (kvdiag.engine.evidence.relative): a figure of the judged step against its comparison arm's.

D5 is the registry's use: the kvarn5 server's largest host compute buffer must be at least
50 times the q8_0 server's. The lines are the recorded ones (tests/fixtures/d5-compute-buffers,
and a whole recorded q8_0 server log of the fork): the seed's 27B model and the synthesized
model of the H200 run both confirm, a q8_0 pair does not, and a missing figure on either side
is inconclusive, never not-reproduced.
"""

from __future__ import annotations

import pytest

from engine_helpers import FIXTURES, Printed
from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.evidence.observe import ArmReading, observe
from kvdiag.engine.evidence.relative import figures, pick
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

BUFFERS = FIXTURES / "d5-compute-buffers"
Q8_0_LOG = FIXTURES / "cpu-fork-775450a68-mtp" / "server-mtp-1.combined.log"
ENABLED = "llama_init_from_model: enabling structured KVarN cache type kvarn_k5v5_g128\n"
ALLOWED = Gate(True, "no sanitizer involved (test gate)")


@pytest.fixture(scope="module")
def d5():
    return load_registry().get("D5")


def arm_read(text: str | None, *, ran: bool = True, why: str = "") -> ArmReading:
    return ArmReading(step="q8_0-control", ran=ran, why=why, exit="exit 0",
                      streams={"combined": text or "", "stderr": text or "", "stdout": ""})


def judged(d5, kvarn5: str, arm: ArmReading | None, calls: list | None = None):
    def comparison() -> ArmReading | None:
        if calls is not None:
            calls.append(1)
        return arm
    obs = observe(d5.default_step, [Printed(kvarn5)], [])
    return judge_attempt(d5, obs, ALLOWED, 1, 0.0, comparison=comparison if arm is not None else None)


@pytest.mark.parametrize("run, ratio, mine, theirs", [
    ("seed-27b", "108.3×", "2195.90", "20.28"),
    ("h200-synth", "97.7×", "956.40", "9.79"),
])
def test_both_recorded_runs_confirm_with_both_lines_and_the_ratio(d5, run, ratio, mine, theirs):
    attempt = judged(d5, (BUFFERS / run / "kvarn5.log").read_text(),
                     arm_read((BUFFERS / run / "q8_0.log").read_text()))
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert attempt.reason == (
        f"kvarn5: {mine} MiB ('sched_reserve:  CUDA_Host compute buffer size = {mine:>8} MiB') against "
        f"q8_0-control: {theirs} MiB ('sched_reserve:  CUDA_Host compute buffer size = {theirs:>8} MiB'): "
        f"{ratio} (at least the 50× that confirms)")
    assert attempt.evidence.quoted == (f"sched_reserve:  CUDA_Host compute buffer size = {mine:>8} MiB",
                                       f"sched_reserve:  CUDA_Host compute buffer size = {theirs:>8} MiB")


def test_a_q8_0_pair_does_not_confirm_and_says_the_ratio(d5):
    """The recorded q8_0 server log of the fork in both arms: the largest host buffer of each, 1.0×."""
    log = Q8_0_LOG.read_text()
    attempt = judged(d5, ENABLED + log, arm_read(log))
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert ("kvarn5: 21.78 MiB ('0.00.112.371 I sched_reserve:        CPU compute buffer size =    21.78 MiB') "
            "against q8_0-control: 21.78 MiB") in attempt.reason
    assert "1.0× (less than the 50× that confirms); the max of 3 and 3 matching line(s)" in attempt.reason
    assert attempt.reason.endswith("no sanitizer involved (test gate)")


def test_the_largest_of_several_lines_counts_unless_the_entry_picks_another(d5):
    found = figures(d5.signature[0].pattern, Q8_0_LOG.read_text())
    assert [f.value for f in found] == [21.78, 21.02, 21.02]
    assert (pick(found, "max").value, pick(found, "first").value, pick(found, "last").value,
            pick(found, "min").value) == (21.78, 21.78, 21.02, 21.02)
    assert figures(d5.signature[0].pattern, "sched_reserve:      CUDA0 compute buffer size =   500.00 MiB\n") == []


@pytest.mark.parametrize("kvarn5, arm, words", [
    (ENABLED + "sched_reserve:  CUDA_Host compute buffer size =   956.40 MiB\n", None,
     "the comparison arm q8_0-control did not run here: no figure to compare against"),
    (ENABLED + "sched_reserve:  CUDA_Host compute buffer size =   956.40 MiB\n",
     arm_read("", ran=False, why="ended inconclusive: a different failure: exit status 1"),
     "the comparison arm q8_0-control ended inconclusive: a different failure: exit status 1: no figure"),
    (ENABLED + "sched_reserve:  CUDA_Host compute buffer size =   956.40 MiB\n",
     arm_read("main: server is listening on http://127.0.0.1:8080\n"),
     "the comparison arm q8_0-control printed no /(CUDA_Host|CPU) +compute buffer size"),
    (ENABLED, arm_read("sched_reserve:  CUDA_Host compute buffer size =     9.79 MiB\n"),
     "the kvarn5 arm printed no /(CUDA_Host|CPU) +compute buffer size"),
])
def test_a_missing_figure_on_either_side_is_inconclusive_saying_which(d5, kvarn5, arm, words):
    attempt = judged(d5, kvarn5, arm)
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert attempt.reason.startswith("the signature could not be judged: ")
    assert words in attempt.reason


def test_the_arm_is_not_read_when_the_step_printed_no_figure(d5):
    calls: list = []
    judged(d5, ENABLED, arm_read("sched_reserve:  CUDA_Host compute buffer size =     9.79 MiB\n"), calls)
    assert calls == []


def test_a_difference_threshold_and_an_unbounded_ratio(d5):
    import dataclasses

    from kvdiag.engine.evidence.relative import compare
    from kvdiag.engine.evidence.relative import Figure

    ratio = d5.signature[0]
    difference = dataclasses.replace(ratio, ratio_min=None, difference_min=500.0)
    big, small, zero = Figure(956.4, "956.40", "a"), Figure(9.79, "9.79", "b"), Figure(0.0, "0.00", "c")
    assert compare(difference, big, small) == (True, "+946.61 MiB (at least the 500 MiB that confirms)")
    assert compare(difference, small, big)[0] is False
    assert compare(ratio, big, zero) == (True, "the comparison arm's figure is 0: the ratio is unbounded")
    assert compare(ratio, zero, zero) == (False, "both figures are 0")
