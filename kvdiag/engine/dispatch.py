"""Handing a scan's units of work to parallel workers, each unit pinned to the GPU with the fewest in flight.

Both phases of a scan use it: the route phase's launch-mode processes (engine.scan_route) and the
sanitized batches and single cases (engine.scan). A unit is whatever the caller deals (a batch of
cases); what it runs is the caller's, and so is what comes back, except that a finished unit may
hand back new units, which run before the ones still queued (a batch's cases that run again alone,
a route process's cases after the one it died in).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable, Sequence, TypeVar

U = TypeVar("U")
R = TypeVar("R")


def dispatch(units: Iterable[U], start: Callable[[U, Any], Callable[[], R]],
             finish: Callable[[U, R, Any], Iterable[U]], *, workers: int, devices: Sequence[Any],
             cancel: threading.Event, salvage: Callable[[R], None], name: str = "kvdiag-scan") -> bool:
    """Run every unit with at most ``workers`` per device at once (``workers`` in all without devices).

    ``start(unit, device)`` is called here, in submission order (so it may number processes), and
    returns the job a worker thread runs; ``finish(unit, result, device)`` is called here as each
    job ends and returns the units to run next. Ctrl-C stops handing out work, sets ``cancel`` (the
    runner then ends the running processes' groups), passes the result of every unit handed out to
    ``salvage`` (a Ctrl-C that lands while results are being finished must not lose the others) and
    returns True; otherwise False once every unit has finished.
    """
    pinned = list(devices)
    limit = workers * max(1, len(pinned))
    inflight = {i: 0 for i in range(len(pinned))}
    queue: deque[U] = deque(units)
    pending: dict[Future, tuple[U, int | None]] = {}
    submitted: list[Future] = []
    pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=name)
    try:
        while queue or pending:
            while queue and len(pending) < limit and not cancel.is_set():
                unit = queue.popleft()
                slot = min(inflight, key=inflight.get) if pinned else None
                future = pool.submit(start(unit, pinned[slot] if slot is not None else None))
                if slot is not None:
                    inflight[slot] += 1
                pending[future] = (unit, slot)
                submitted.append(future)
            if not pending:
                break
            done, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                unit, slot = pending.pop(future)
                if slot is not None:
                    inflight[slot] -= 1
                again = list(finish(unit, future.result(), pinned[slot] if slot is not None else None))
                queue.extendleft(reversed(again))
    except KeyboardInterrupt:
        cancel.set()
        for future in submitted:
            try:
                outcome = future.result()
            except Exception:  # a worker that broke while being cancelled loses only its own unit
                continue
            salvage(outcome)
        return True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return False
