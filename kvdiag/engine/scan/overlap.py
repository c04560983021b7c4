"""An overlapped routed scan: the detect phase sanitizes routed cases while the route phase routes the rest.

Why: one after the other, a whole-op scan of D2 on an H100 spent 27–31 s routing and 51–61 s
sanitizing, while the GPU was about 5 % busy and the host used a third of its cores
(docs/performance.md). A case's detect needs only its own route, so the two phases can run at
once and the scan's wall tends to the longer phase instead of their sum.

How: the route phase (engine.scan.route) runs in a thread of its own: its own dispatch with its
route workers per device, its processes numbered as before, but at most OVERLAP_ROUTE_BATCH cases
each, so that the first routed cases come early. Each route process's answer goes to a
DetectBatcher, which sorts its cases as RouteOutcome.to_detect and .alone sort the whole phase's:
a case the route process saw fail or end its process goes to the detect phase at once, one per
process; a reached case (or one whose route process could not start) waits until it fills a batch
of the detect phase's size, with the cases that arrived before it (dealt) or with those that
launched the same kernels (by-kernel); what waits when routing ends then goes in batches, ordered
as the sequential path orders them. The detect phase is engine.scan.cases fed through a
engine.scan.dispatch.UnitFeed, in the calling thread, where a Ctrl-C lands: one cancel event ends both
phases, and what either finished is kept. Everything else is engine.scan.phases' sequential path:
the same cases sanitized, judged and merged the same way.

What differs: the detect phase's batch size is reckoned from every case routed (how many reach
the entry's kernels is known only when routing ends), a detect case's number (its caseNNNN log)
is its place in the route listing, and a dealt batch holds cases in the order they were routed
(each route process's cases are themselves dealt from the whole listing, so heavy shapes still
spread). Both phases' processes lease slots from the same per-GPU pool (proc.slots), so together
they never run more processes on one GPU than its pool holds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kvdiag.engine.scan.dispatch import UnitFeed
from kvdiag.engine.scan.cases import CaseSpace, ScanResult, detect_batch_size, detect_step, scan, scan_step
from kvdiag.engine.scan.route import RoutedBatch, RouteOutcome, route
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir

OVERLAP_ROUTE_BATCH = 128
"""Cases per route process when the phases overlap (ROUTE_MAX_BATCH, 512, otherwise). The detect
phase's first batch waits for the first route process to end: at about 0.06 s a bare case
(docs/performance.md: 2932 cases in 8 processes, 23 s) a process of 366 cases hands over nothing for
about 22 s, one of 128 after about 8 s. Smaller still would pay more process starts, which the host
serialises: 128 makes that scan's route phase 23 processes instead of 8."""
WAITING_BATCHES = 2
"""By kernel, how many batches' worth of cases may wait before one goes from the largest groups. On the
H200 (device session 9) no kernel set's group filled a batch of 128 before routing ended, so the first
detect batch went at the route phase's end and the overlap gained nothing; with this bound it goes after
about 256 reached cases (three route processes of 128), in batches of as few kernel sets as the waiting
cases allow."""
JOIN_POLL_S = 0.1
Unit = list[tuple[int, str]]


@dataclass
class DetectBatcher:
    """The detect phase's units (lists of (index, params)) from the route processes' answers, put into
    ``feed`` as they form. Only the route thread calls it."""

    feed: UnitFeed[Unit]
    cases: Sequence[str]            # every case routed, in the listing's order: a case's index is its place here
    size: int                       # the detect phase's cases per process
    by_kernel: bool = False
    sent: list[str] = field(default_factory=list)       # every case handed to the detect phase
    first_sent: float | None = None                     # when the first unit was handed over (monotonic)
    _waiting: dict[tuple[str, ...], list[str]] = field(default_factory=dict, init=False)
    _index: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._index = {params: i for i, params in enumerate(self.cases, start=1)}

    def take(self, batch: RoutedBatch) -> None:
        """One route process's cases: its failed or ended cases alone at once (RouteOutcome.alone), its
        reached and not-started cases into their group; a group that fills a batch goes."""
        alone = () if batch.not_started else tuple(batch.unrouted)
        batched = [*batch.reached, *(batch.unrouted if batch.not_started else ())]
        units: list[Unit] = [[(self._index[case], case)] for case in alone]
        for case in batched:
            key = tuple(sorted(batch.launched.get(case, ()))) if self.by_kernel else ()
            group = self._waiting.setdefault(key, [])
            group.append(case)
            if len(group) >= self.size:
                units.append(self._unit(self._waiting.pop(key)))
            elif sum(map(len, self._waiting.values())) >= WAITING_BATCHES * self.size:
                units.append(self._unit(self._from_largest()))
        self._send(units)

    def _from_largest(self) -> list[str]:
        """One batch from the largest groups, whole groups first (the fewest kernel sets in it), the last
        one cut in listing order: what goes when many cases wait but no group has filled a batch."""
        out: list[str] = []
        for key in sorted(self._waiting, key=lambda k: (-len(self._waiting[k]), k)):
            group = sorted(self._waiting[key], key=self._index.get)
            out, self._waiting[key] = out + group[:self.size - len(out)], group[self.size - len(out):]
            if not self._waiting[key]:
                del self._waiting[key]
            if len(out) == self.size:
                break
        return out

    def flush(self) -> None:
        """Routing ended: what still waits goes in batches of ``size``, by kernels then listing order, as
        the sequential path's by-kernel batches (one group only when dealt)."""
        rest = [case for key in sorted(self._waiting) for case in sorted(self._waiting[key], key=self._index.get)]
        self._waiting.clear()
        self._send([self._unit(rest[i:i + self.size]) for i in range(0, len(rest), self.size)])

    def _unit(self, cases: Sequence[str]) -> Unit:
        return sorted((self._index[case], case) for case in cases)   # the listing's order, as a dealt batch

    def _send(self, units: list[Unit]) -> None:
        if not units:
            return
        if self.first_sent is None:
            self.first_sent = time.monotonic()
        self.sent.extend(case for unit in units for _, case in unit)
        self.feed.put(units)


@dataclass
class PhasesRun:
    """Both phases of a routed scan as they ended, overlapped or one after the other (engine.scan.phases
    merges them into one ScanResult)."""

    routed: RouteOutcome
    result: ScanResult          # the detect phase's
    detected: int               # cases handed to the detect phase
    detect_wall_s: float        # its own wall (overlapped: from the first unit handed over to its end)


def run_overlapped(entry: Entry, target: Target, run_dir: RunDir, *, space: CaseSpace, cases: Sequence[str],
                   route_workers: int, by_kernel: bool, workers: int, gate_provider: Any, devices: Sequence[Any],
                   batch: int, kernel_filter: str | None, on_case: Callable[[str, Attempt], None] | None,
                   when_routed: Callable[[RouteOutcome, int], None]) -> PhasesRun:
    """Route ``cases`` in a thread while the calling thread sanitizes those that need it as they come.
    ``when_routed(outcome, n_detect)`` is called in the route thread once routing ended uninterrupted
    (to say so). An exception in either phase cancels the other and is raised here once both ended."""
    cancel = threading.Event()
    feed: UnitFeed[Unit] = UnitFeed()
    size = detect_batch_size(detect_step(entry, kernel_filter), cases, batch, workers * max(1, len(devices)))
    batcher = DetectBatcher(feed, cases, size, by_kernel)
    outcome: dict[str, Any] = {}

    def route_phase() -> None:
        try:
            routed = route(entry, scan_step(entry), target, run_dir, cases=cases, workers=route_workers,
                           devices=devices, gate_provider=gate_provider, cancel=cancel, on_case=on_case,
                           most=OVERLAP_ROUTE_BATCH, on_batch=batcher.take)
            outcome["routed"] = routed
            if not routed.interrupted and not cancel.is_set():
                batcher.flush()
                when_routed(routed, len(batcher.sent))
        except BaseException as exc:    # raised again in the calling thread, after the detect phase ended
            outcome["error"] = exc
            cancel.set()
        finally:
            feed.close()                # the detect phase's dispatch ends once it has run what it was fed

    thread = threading.Thread(target=route_phase, name="kvdiag-route-phase", daemon=True)
    thread.start()
    try:
        result = scan(entry, target, run_dir, space=dataclasses.replace(space, supported=tuple(cases)),
                      workers=workers, gate_provider=gate_provider, devices=devices, batch=batch,
                      kernel_filter=kernel_filter, on_case=on_case, cancel=cancel, feed=feed)
    except BaseException:
        cancel.set()
        raise
    finally:
        join_route(thread, cancel)
    ended = time.monotonic()
    if "error" in outcome:
        raise outcome["error"]
    result.interrupted = result.interrupted or cancel.is_set()     # a Ctrl-C in either phase ends both
    wall = ended - batcher.first_sent if batcher.first_sent is not None else 0.0
    return PhasesRun(outcome["routed"], result, len(batcher.sent), wall)


def join_route(thread: threading.Thread, cancel: threading.Event) -> None:
    """Wait for the route thread to end. A Ctrl-C meanwhile cancels it (the runner ends its processes)
    and the wait goes on: what it routed is kept, as the detect phase's finished cases are."""
    while thread.is_alive():
        try:
            thread.join(JOIN_POLL_S)
        except KeyboardInterrupt:
            cancel.set()
