"""A time limit on reading output, for the judging that follows a step.

`run --timeout 3` bounded the step's process, but not the reading of what it printed: a
program may print gigabytes within its 3 s, and reading them is linear but not free (issue 43).
The judging sets a deadline here; the parsers' line loop (kvdiag.parse.text.iter_lines) looks
at it every few thousand lines and raises :class:`OutOfTime` past it, and the judging then
reads only the output's end. The deadline is per thread: a sweep judges several entries at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["CHECK_EVERY", "OutOfTime", "checked", "time_limit"]

CHECK_EVERY = 4096          # lines between two looks at the clock (a few milliseconds of parsing)
_local = threading.local()


class OutOfTime(Exception):
    """The reading of some output passed the deadline :func:`time_limit` set."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Within the block, a parser of this thread that reads past ``seconds`` raises OutOfTime."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = previous


def checked(lines: Iterable[str]) -> Iterator[str]:
    """``lines``, one at a time, with a look at this thread's deadline every CHECK_EVERY lines."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        yield from lines
        return
    for i, line in enumerate(lines):
        if not i % CHECK_EVERY and time.monotonic() > deadline:
            raise OutOfTime
        yield line
