"""Turns at running a process: a scan's workers judge one unit's output while the next unit's process runs.

Why: a scan's worker used to run a batch's process and then judge its output before taking the next
unit, so its GPU slot stood idle while it judged. On an H100 (device session 32, scan D2 --params hsk) a
detect batch printed 8 to 10 MB of barrier records; the nine batches of the first wave ended within
three seconds of each other, their nine judgings shared one interpreter, and six of the second wave's
batches started 7 to 10 s after a slot had come free (the 7 s between the route phase's last process and
the detect phase's first batch had another cause: engine.evidence.launch_proof.compiled_kernels).

How: engine.scan.dispatch keeps more units in flight than it has workers and gives each unit's thread
its device's ``Turns`` (``running``, a context variable); ``engine.verdict.devices.gpu_lease``, which every
process of a scan's unit starts under, takes a turn for the process and gives it back when the process
ends, before the judging. So at most ``workers`` processes run per device, as ``-j`` says, and a unit whose
process ended judges while the next one's runs. Turns go in the order the dispatch handed the units out
(each gets its place in the line then, before its thread starts), so that the queue's order (the heaviest
units first, cases to run again before the rest) is the order processes start. Outside a dispatch
(``kvdiag run``) there are no turns.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from contextvars import ContextVar
from typing import Callable, ContextManager, Iterator, TypeVar

R = TypeVar("R")
POLL_S = 0.1        # how often a unit waiting for its turn looks at the cancel event
PATIENCE_S = 2.0    # how long a unit with a free turn waits for the units ahead of it to ask for theirs


class TurnCancelled(BaseException):
    """The unit was cancelled (Ctrl-C, or the other phase of an overlapped scan) while it waited for its turn:
    its process never started. Not an ``Exception``, so that no handler written for a failure swallows it on
    its way out of the unit; ``with_turns`` makes it ``NOT_STARTED`` for the dispatch."""


class NotStarted:
    """What a unit's job returns when it was cancelled before its process started: the dispatch treats the
    unit as never handed out (no result to finish or salvage; its cases stay not run)."""

    def __repr__(self) -> str:
        return "NOT_STARTED"


NOT_STARTED = NotStarted()


class Turns:
    """At most ``n`` processes at once among the units that share it (one device's units of one dispatch),
    started in the order the units took their places in the line (``enter``).

    A unit that asks for its turn waits while ``n`` processes run or while a unit ahead of it in the line
    has not had its own, but no longer than PATIENCE_S while a turn is free: a unit ahead that is slow to
    ask (or waits for something a later unit holds) delays the others a little and never stops them. A
    unit that leaves (``leave``: its job ended) gives its place up, whether or not it used it. A turn is per thread and nests: a unit already holding one (a case's control inside its
    lease) does not wait for a second; a unit asking again after its turn ended queues at the back. Once
    ``cancel`` is set no turn is given: a unit waiting for one, or asking for one then, raises TurnCancelled
    instead of starting a process after the stop."""

    def __init__(self, n: int, cancel: threading.Event) -> None:
        if n < 1:
            raise ValueError(f"a process needs at least one turn, not {n}")
        self.n = n
        self._cancel = cancel
        self._changed = threading.Condition()
        self._tickets = itertools.count()
        self._line: list[int] = []          # the places of units that have not had their turn, in order
        self._running = 0
        self._depth = threading.local()

    def enter(self) -> int:
        """A place at the back of the line, for a unit about to be handed to a worker thread."""
        with self._changed:
            ticket = next(self._tickets)
            self._line.append(ticket)
            return ticket

    def leave(self, ticket: int) -> None:
        """The unit's job ended: its place, if unused, goes to the units behind it."""
        with self._changed:
            if ticket in self._line:
                self._line.remove(ticket)
                self._changed.notify_all()

    @contextlib.contextmanager
    def turn(self, ticket: int | None = None) -> Iterator[None]:
        if getattr(self._depth, "n", 0):
            self._depth.n += 1
            try:
                yield
            finally:
                self._depth.n -= 1
            return
        with self._changed:
            if ticket is None or ticket not in self._line:
                ticket = next(self._tickets)
                self._line.append(ticket)
            asked = time.monotonic()
            while not self._cancel.is_set() and (
                    self._running >= self.n or (self._line[0] != ticket and time.monotonic() - asked < PATIENCE_S)):
                if self._running >= self.n:
                    asked = time.monotonic()        # patience counts while a turn is free
                self._changed.wait(POLL_S)
            self._line.remove(ticket)
            self._changed.notify_all()              # the next in line may take a free turn now
            if self._cancel.is_set():
                raise TurnCancelled()
            self._running += 1
        self._depth.n = 1
        try:
            yield
        finally:
            self._depth.n = 0
            with self._changed:
                self._running -= 1
                self._changed.notify_all()


running: ContextVar[tuple[Turns, int] | None] = ContextVar("kvdiag_process_turns", default=None)


def process_turn() -> ContextManager[None]:
    """The current unit's turn at running a process, or nothing to wait for outside a dispatch."""
    current = running.get()
    return current[0].turn(current[1]) if current is not None else contextlib.nullcontext()


def with_turns(job: Callable[[], R], turns: Turns) -> Callable[[], R | NotStarted]:
    """``job`` as a worker thread runs it, its place in ``turns``' line taken now (in the dispatch's order):
    its processes take their turns from there; NOT_STARTED when it was cancelled before its process started."""
    ticket = turns.enter()

    def run() -> R | NotStarted:
        token = running.set((turns, ticket))
        try:
            return job()
        except TurnCancelled:
            return NOT_STARTED
        finally:
            running.reset(token)
            turns.leave(ticket)
    return run
