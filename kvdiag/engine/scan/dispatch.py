"""Handing a scan's units of work to parallel workers, each unit pinned to the GPU with the fewest in flight.

Both phases of a scan use it: the route phase's launch-mode processes (engine.scan.route) and the
sanitized batches and single cases (engine.scan.cases). A unit is whatever the caller deals (a batch of
cases); what it runs is the caller's, and so is what comes back, except that a finished unit may
hand back new units, which run before the ones still queued (a batch's cases that run again alone,
a route process's cases after the one it died in).

Units may also arrive while it runs (a UnitFeed): the detect phase of an overlapped scan
(engine.scan.overlap) starts on the first batches the route phase hands over, instead of waiting
for every case to be routed.

A worker's unit runs a process, then judges its output. UNITS_PER_WORKER units are in flight per worker,
and each device's units share that device's proc.turns.Turns: at most ``workers`` of them have a process
running, so a unit whose process ended judges while the next unit's process runs, instead of keeping a
GPU slot idle while it reads megabytes of records (kvdiag.proc.turns says what that cost on an H100).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar

from kvdiag.proc.turns import NOT_STARTED, Turns, with_turns

U = TypeVar("U")
R = TypeVar("R")
WAIT_S = 0.5          # how long one turn waits for a running unit to end
FEED_POLL_S = 0.1     # a turn's wait while a feed is open and a worker is free: a unit that arrives starts soon
UNITS_PER_WORKER = 2  # one whose process runs, one judging its output or waiting for its turn


class UnitFeed(Generic[U]):
    """Units handed to a running ``dispatch`` from another thread, until ``close``.

    The producer ``put``s units and ``close``s the feed once it has no more (in a ``finally``: a
    dispatch fed by a producer that died would otherwise wait for ever). ``take`` returns, without
    waiting, what arrived since the last ``take``; ``finished`` is true once the feed is closed and
    everything put was taken, so a consumer that sees it can stop: nothing can arrive after it."""

    def __init__(self) -> None:
        self._units: list[U] = []
        self._closed = False
        self._changed = threading.Condition()

    def put(self, units: Iterable[U]) -> None:
        with self._changed:
            if self._closed:
                raise RuntimeError("a unit put into a closed feed would never run")
            self._units.extend(units)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def take(self) -> list[U]:
        with self._changed:
            taken, self._units = self._units, []
            return taken

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    @property
    def finished(self) -> bool:
        with self._changed:
            return self._closed and not self._units

    def wait(self, timeout: float) -> None:
        """Return when a unit arrived or the feed closed, or after ``timeout`` seconds."""
        with self._changed:
            if not self._units and not self._closed:
                self._changed.wait(timeout)


def dispatch(units: Iterable[U], start: Callable[[U, Any], Callable[[], R]],
             finish: Callable[[U, R, Any], Iterable[U]], *, workers: int, devices: Sequence[Any],
             cancel: threading.Event, salvage: Callable[[R], None], name: str = "kvdiag-scan",
             feed: UnitFeed[U] | None = None, not_started: Callable[[U], None] | None = None) -> bool:
    """Run every unit with at most ``workers`` per device at once (``workers`` in all without devices).

    ``start(unit, device)`` is called here, in submission order (so it may number processes), and
    returns the job a worker thread runs; ``finish(unit, result, device)`` is called here as each
    job ends and returns the units to run next. Ctrl-C stops handing out work, sets ``cancel`` (the
    runner then ends the running processes' groups), passes the result of every unit handed out to
    ``salvage`` (a Ctrl-C that lands while results are being finished must not lose the others) and
    returns True; otherwise False once every unit has finished.

    ``feed``: units that arrive while it runs, after ``units``; the loop goes on until the feed is
    finished (closed, every unit taken) and every unit has ended, or until ``cancel`` is set (by a
    Ctrl-C here, or by the caller: then it returns once the running units have ended, as without a
    feed). Units from the feed queue behind those already queued.

    ``not_started(unit)``: called for a unit handed out whose process never started (cancelled while it
    waited for its turn, kvdiag.proc.turns); it is neither finished nor salvaged, as if never handed out.
    """
    pinned = list(devices)
    limit = workers * max(1, len(pinned)) * UNITS_PER_WORKER
    turns = [Turns(workers, cancel) for _ in (pinned or [None])]
    inflight = {i: 0 for i in range(len(pinned))}
    queue: deque[U] = deque(units)
    pending: dict[Future, tuple[U, int | None]] = {}
    submitted: list[Future] = []
    pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=name)
    try:
        while True:
            if feed is not None:
                queue.extend(feed.take())
            if not (queue or pending or (feed is not None and not feed.finished)):
                break
            while queue and len(pending) < limit and not cancel.is_set():
                unit = queue.popleft()
                slot = min(inflight, key=inflight.get) if pinned else None
                job = start(unit, pinned[slot] if slot is not None else None)
                future = pool.submit(with_turns(job, turns[slot if slot is not None else 0]))
                if slot is not None:
                    inflight[slot] += 1
                pending[future] = (unit, slot)
                submitted.append(future)
            if not pending:
                if feed is None or cancel.is_set():
                    break
                feed.wait(FEED_POLL_S)        # nothing running: wait for the producer
                continue
            polling = feed is not None and len(pending) < limit and not feed.closed
            done, _ = wait(list(pending), timeout=FEED_POLL_S if polling else WAIT_S, return_when=FIRST_COMPLETED)
            for future in done:
                unit, slot = pending.pop(future)
                if slot is not None:
                    inflight[slot] -= 1
                outcome = future.result()
                if outcome is NOT_STARTED:
                    if not_started is not None:
                        not_started(unit)
                    continue
                again = list(finish(unit, outcome, pinned[slot] if slot is not None else None))
                queue.extendleft(reversed(again))
    except KeyboardInterrupt:
        cancel.set()
        for future in submitted:
            try:
                outcome = future.result()
            except Exception:  # a worker that broke while being cancelled loses only its own unit
                continue
            if outcome is NOT_STARTED:
                if not_started is not None and future in pending:     # not yet told by the loop above
                    not_started(pending[future][0])
                continue
            salvage(outcome)
        return True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return False
