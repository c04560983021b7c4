"""One ceiling on every child's time, for as long as a command's work lasts.

`kvdiag run --timeout 3` promised a step of 3 s, but only the step's own command kept to it:
the enumeration of test cases, the support and launch listings and the build checks ran each
under its own allowance (300 s for the enumeration), so a hung binary cost 304 s (issue 43).
Those calls are many and far apart; rather than thread a number through each, the command
sets a ceiling here and :func:`kvdiag.proc.runner.run_command` holds every child to it. It is
process-wide, not per thread, because a run's children start from worker threads too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["bounded", "child_time_limit"]

_ceilings: list[float] = []
_lock = threading.Lock()


@contextmanager
def child_time_limit(seconds: float | None) -> Iterator[None]:
    """Every child started inside gets at most ``seconds`` (None: no ceiling is added)."""
    if seconds is None:
        yield
        return
    with _lock:
        _ceilings.append(float(seconds))
    try:
        yield
    finally:
        with _lock:
            _ceilings.remove(float(seconds))


def bounded(timeout: float) -> float:
    """``timeout``, lowered to the smallest ceiling in force."""
    with _lock:
        return min([timeout, *_ceilings])
