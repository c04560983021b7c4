"""Racecheck only where it can see: a case whose launches hold no shared memory is spared it.

Racecheck detects hazards on shared memory and on nothing else, so a case none of whose kernels
holds a byte of it (static or dynamic) cannot give it a finding: on ggml d99724f2, for instance,
every CONV_2D and IM2COL_3D case (their kernels declare none; docs/performance.md has what it
saves). Which kernels a case launches, and with how much shared memory, is decided by ggml-cuda's
host code from the case's shapes and the GPU, identically with and without a
sanitizer, and the launch probe prints both (``kvdiag-launch: <kernel>  [kvdiag-smem S+D]``).

Where the launches come from: the processes of the first other tool asked for (synccheck,
memcheck, initcheck: they run every case anyway, so listing costs nothing more), else a route
pass that runs every case once with no sanitizer. An op's racecheck processes start as soon as one
listing process has given a batch's worth of its cases that need them (the batch size a plan without
routing gives that op), those cases dealt over as many processes as they fill, and the rest of the
op's cases once the listing of its every case has ended; a case needs it unless spared:

* a case that ran (status OK), listed at least one launch, and whose every launch said its shared
  memory and held none is ``spared`` under racecheck, its record saying whose process listed how
  many launches;
* every other case is sanitized: a launch held shared memory, a launch did not say (the kernel
  lookup failed, or a cuBLAS call, whose own kernels the probe cannot see), it listed no launch at
  all (a program whose launches the probe cannot see, such as one linked with the static CUDA
  runtime, lists none, which must not read as "launched nothing"), it did not end OK, or its
  listing ended without a status (an abort, a budget overrun, a process that could not start).

Routing needs the launch probe's program (``program`` mode ``launch``); the build's own program,
or ``--no-route``, sanitizes every case under racecheck, and the result says which ran and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from kvdiag.engine.discover.batch import ROUTE, Unit
from kvdiag.engine.discover.cases import CLEAN, FINDINGS, SPARED, CaseRecord
from kvdiag.engine.scan.batch import deal

#: the tools that see shared memory only
SHARED_MEMORY_TOOLS = ("racecheck",)
_LISTED_STATES = (CLEAN, FINDINGS)


@dataclass(frozen=True)
class RoutePlan:
    """Which tools are routed, whose processes list the launches (a tool, or ROUTE), and why."""

    routed: tuple[str, ...] = ()
    source: str | None = None
    why: str = ""

    @property
    def active(self) -> bool:
        return bool(self.routed) and self.source is not None

    def to_dict(self) -> dict[str, Any]:
        return {"routed": list(self.routed), "source": self.source, "why": self.why}


def plan_routing(tools: Sequence[str], mode: str, *, route: bool = True) -> RoutePlan:
    """Route the shared-memory tools among ``tools`` when the program prints launches (``launch`` mode)."""
    routed = tuple(t for t in tools if t in SHARED_MEMORY_TOOLS)
    if not routed:
        return RoutePlan(why="no tool that sees only shared memory was asked for")
    if not route:
        return RoutePlan(why="--no-route: every case sanitized under every tool")
    if mode != "launch":
        return RoutePlan(why="not routed: the build's own program does not print its launches' shared memory "
                             "(the launch probe's program could not be used)")
    others = [t for t in tools if t not in routed]
    source = others[0] if others else ROUTE
    where = f"{source}'s processes" if others else "a route pass without a sanitizer"
    return RoutePlan(routed, source, f"{', '.join(routed)} only on cases whose launches hold shared memory, the "
                                     f"launches listed by {where}")


@dataclass
class SharedMemoryRouter:
    """Hands out the routed tools' units for the cases that need them, a batch as soon as one is full
    and an op's last one when its listing has ended, and ``spared`` records for the others.

    Releasing only whole ops would start racecheck at the very end: the listing tool's units run
    largest first, so every op's short last batch waits behind every op's full ones (measured: after
    515 s of a whole-suite discovery on an H100, one op of 108 had been listed whole and racecheck
    had not started; tests/fixtures/device/h100-session18)."""

    plan: RoutePlan
    ops: dict[str, tuple[str, ...]]                  # op -> its cases, in the suite's order
    batch_size: Callable[[tuple[str, ...]], int]     # the cases per process for an op's cases
    mode: str = "launch"
    waiting: dict[str, set[str]] = field(default_factory=dict)
    needing: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"sanitized": 0, "spared": 0})

    def __post_init__(self) -> None:
        self.waiting = {op: set(cases) for op, cases in self.ops.items()}
        self.needing = {op: [] for op in self.ops}

    def take(self, records: Iterable[CaseRecord]) -> tuple[list[Unit], list[CaseRecord]]:
        """The listing's records of one process -> (units to run now, spared records)."""
        units: list[Unit] = []
        spared: list[CaseRecord] = []
        touched: list[str] = []
        for record in records:
            waiting = self.waiting.get(record.op)
            if record.tool != self.plan.source or waiting is None or record.params not in waiting:
                continue
            waiting.discard(record.params)
            if holds_no_shared_memory(record):
                spared += [self._spared(tool, record) for tool in self.plan.routed]
            else:
                self.needing[record.op].append(record.params)
            if record.op not in touched:
                touched.append(record.op)
        for op in touched:
            size = max(1, self.batch_size(self.ops[op]))
            if self.needing[op] and (not self.waiting[op] or len(self.needing[op]) >= size):
                units += self._release(op, size)
        return units, spared

    def _release(self, op: str, size: int) -> list[Unit]:
        """Every case of ``op`` that needs the routed tools, dealt into batches of at most ``size``: one
        listing process gives its cases small to large, as test-backend-ops lists them, so consecutive
        batches would put its heaviest in one process (TOP_K's routed racecheck batches on the H100 of
        device session 20 ran 9.8 s to over 146 s)."""
        cases, self.needing[op] = list(self.needing[op]), []
        self.counts["sanitized"] += len(cases) * len(self.plan.routed)
        return [Unit(tool, op, tuple(batch)) for batch in deal(cases, size) for tool in self.plan.routed]

    def _spared(self, tool: str, record: CaseRecord) -> CaseRecord:
        self.counts["spared"] += 1
        by = "the route pass" if record.tool == ROUTE else f"its {record.tool} process"
        what = f"{record.launches} launch(es), none holding shared memory"
        return CaseRecord(tool=tool, op=record.op, params=record.params, state=SPARED, status=record.status,
                          why=f"not run under {tool}: {by} listed {what}; {tool} sees only shared memory",
                          log=record.log, lines=record.lines, mode=self.mode, launches=record.launches,
                          shared_memory=record.shared_memory)


def holds_no_shared_memory(record: CaseRecord) -> bool:
    """The case ran OK, listed at least one launch, and none of its launches held shared memory."""
    return (record.state in _LISTED_STATES and record.status == "OK" and bool(record.launches)
            and record.shared_memory == 0)
