"""kvdiag.engine.discover.occupancy: how many processes ran at once, from each one's start and end."""

from __future__ import annotations

import pytest

from kvdiag.engine.discover.occupancy import Occupancy, occupancy


def rows(*spans: tuple[float, float]) -> list[dict]:
    return [{"process": f"p{i}", "started_unix": s, "ended_unix": e} for i, (s, e) in enumerate(spans)]


def test_time_below_the_pool_is_counted_wherever_it_falls_and_the_tail_from_the_last_full_moment():
    """0-1: two run; 1-6: three; 6-8: two; 8-10: one. With a pool of three: 5 s below it, the last 4 s."""
    ran = occupancy(rows((0, 10), (0, 4), (4, 8), (1, 6)), 3)
    assert ran == Occupancy(most=3, pool=3, span_s=10.0, below_pool_s=5.0, tail_s=4.0)
    assert ran.describe() == ("processes at once: at most 3 of the pool's 3; fewer than 3 for 5.0 s of 10.0 s, "
                              "the last 4.0 s of them at the end")


def test_a_process_ending_as_another_starts_does_not_count_as_a_gap_or_an_overlap():
    ran = occupancy(rows((0, 5), (5, 10)), 1)
    assert (ran.most, ran.below_pool_s, ran.tail_s) == (1, 0.0, 0.0)


def test_a_pool_never_filled_is_below_it_throughout():
    ran = occupancy(rows((0, 3), (1, 2)), 9)
    assert (ran.most, ran.below_pool_s, ran.tail_s, ran.span_s) == (2, 3.0, 3.0, 3.0)


@pytest.mark.parametrize("bad", [[], [{"process": "old"}], [{"started_unix": 5, "ended_unix": 1}],
                                 [{"started_unix": "0", "ended_unix": 1}]])
def test_rows_without_their_times_give_nothing_rather_than_a_wrong_figure(bad):
    assert occupancy(bad, 4) is None


def test_the_record_survives_a_round_trip_and_a_damaged_one_reads_as_none():
    ran = occupancy(rows((0, 2.5), (0.5, 1)), 2)
    assert Occupancy.from_dict(ran.to_dict()) == ran
    assert Occupancy.from_dict({"most": 2}) is None and Occupancy.from_dict(None) is None
