"""engine.scan.dispatch with a UnitFeed: units that arrive while it runs (an overlapped scan's detect phase).

No processes: a unit is a name, its job returns it. Each dispatch runs in a thread the test joins
with a timeout, so a loop that never ends fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest

from kvdiag.engine.scan import dispatch as dispatch_module
from kvdiag.engine.scan.dispatch import UnitFeed, dispatch

LIMIT_S = 20


class Run:
    """One dispatch in a thread: what started, finished and was salvaged, and what it returned."""

    def __init__(self, units=(), feed=None, workers=2, job=None, finish=None, cancel=None):
        self.started: list[str] = []
        self.finished: list[str] = []
        self.salvaged: list[str] = []
        self.cancel = cancel or threading.Event()
        self.returned: list[bool] = []
        self.error: list[BaseException] = []
        job = job or (lambda unit: unit)
        finish = finish or (lambda unit, result, device: self.finished.append(result) or [])

        def start(unit, device):
            self.started.append(unit)
            return lambda: job(unit)

        def body():
            try:
                self.returned.append(dispatch(units, start, finish, workers=workers, devices=(), cancel=self.cancel,
                                              salvage=self.salvaged.append, feed=feed))
            except BaseException as exc:     # noqa: BLE001 - the test reads it
                self.error.append(exc)

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def ended(self, timeout: float = LIMIT_S) -> bool:
        self.thread.join(timeout)
        assert not self.error, self.error
        return not self.thread.is_alive()


def until(condition, timeout: float = LIMIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_units_that_arrive_late_run_and_close_ends_the_loop():
    feed: UnitFeed[str] = UnitFeed()
    run = Run(units=["a"], feed=feed)
    assert until(lambda: run.finished == ["a"])
    time.sleep(0.3)
    assert run.thread.is_alive() and not run.returned      # the feed is open: the loop waits for more
    feed.put(["b", "c"])
    assert until(lambda: sorted(run.finished) == ["a", "b", "c"])
    assert run.thread.is_alive()
    feed.put(["d"])
    feed.close()
    assert run.ended() and run.returned == [False]
    assert sorted(run.finished) == ["a", "b", "c", "d"] and run.started[0] == "a"


def test_a_feed_closed_before_its_units_were_taken_still_runs_them():
    feed: UnitFeed[str] = UnitFeed()
    feed.put(["x", "y"])
    feed.close()
    assert not feed.finished                               # closed, but units wait to be taken
    run = Run(feed=feed)
    assert run.ended() and sorted(run.finished) == ["x", "y"] and feed.finished


def test_an_empty_closed_feed_ends_at_once():
    feed: UnitFeed[str] = UnitFeed()
    feed.close()
    run = Run(feed=feed)
    assert run.ended(5) and run.returned == [False] and run.started == []


def test_units_handed_back_run_before_the_feeds(monkeypatch):
    """Handed back, a unit goes to the front of the queue (one unit in flight per worker here, so that the
    queue's order is the start order; with more, a queued unit may start while "first" is still judged)."""
    monkeypatch.setattr(dispatch_module, "UNITS_PER_WORKER", 1)
    feed: UnitFeed[str] = UnitFeed()
    gate = threading.Event()

    def job(unit):
        if unit == "first":
            gate.wait(LIMIT_S)
        return unit

    def finish(unit, result, device):
        run.finished.append(result)
        return ["again"] if unit == "first" else []

    run = Run(units=["first"], feed=feed, workers=1, job=job, finish=finish)
    assert until(lambda: run.started == ["first"])
    feed.put(["fed"])
    time.sleep(0.3)                                        # taken into the queue while "first" runs
    gate.set()
    feed.close()
    assert run.ended() and run.started == ["first", "again", "fed"]


def test_ctrl_c_with_the_feed_open_salvages_every_unit_handed_out_and_returns_true():
    """A Ctrl-C (here raised where a result is finished) while the producer still feeds: True, every
    started unit's result salvaged (the slow one ends because cancel is set), no later unit started."""
    feed: UnitFeed[str] = UnitFeed()
    cancel = threading.Event()

    def job(unit):
        if unit == "slow":
            cancel.wait(LIMIT_S)
            return "slow (cancelled)"
        return unit

    def finish(unit, result, device):
        raise KeyboardInterrupt

    run = Run(units=["slow"], feed=feed, job=job, finish=finish, cancel=cancel)
    assert until(lambda: run.started == ["slow"])
    feed.put(["quick"])
    assert run.ended()
    assert run.returned == [True] and run.cancel.is_set()
    assert sorted(run.salvaged) == ["quick", "slow (cancelled)"]
    feed.put(["late"])                                     # the feed was never closed: still open
    time.sleep(0.2)
    assert "late" not in run.started


def test_a_cancel_from_outside_ends_a_loop_whose_feed_stays_open():
    """The other phase of an overlapped scan cancels: the loop returns once its running units ended,
    although nobody closes the feed, and starts nothing more."""
    feed: UnitFeed[str] = UnitFeed()
    run = Run(units=["a"], feed=feed)
    assert until(lambda: run.finished == ["a"])
    run.cancel.set()
    feed.put(["b"])
    assert run.ended(5) and run.returned == [False] and run.started == ["a"]


def test_a_feed_refuses_units_once_closed():
    feed: UnitFeed[str] = UnitFeed()
    feed.put(["a"])
    feed.close()
    with pytest.raises(RuntimeError):
        feed.put(["b"])
    assert feed.take() == ["a"] and feed.take() == [] and feed.finished


def test_without_a_feed_the_loop_ends_when_its_units_are_done():
    run = Run(units=["a", "b", "c"])
    assert run.ended(5) and run.returned == [False] and sorted(run.finished) == ["a", "b", "c"]
