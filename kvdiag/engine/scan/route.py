"""The route phase of a scan: which cases reach the entry's kernels, learned without the sanitizer.

Why: under a sanitizer a case costs about twice what it costs bare, and one GPU time-slices
the sanitized processes (docs/performance.md). A whole-op scan of D2 sanitized 2932 cases
of which 901 launched none of D2's kernels: their verdict (not-applicable for that case)
came from the launch lines, not from the sanitizer. Which kernels a case launches is decided
by the host code from the case's shapes and types and the GPU, the same with or without a
sanitizer, so it can be learned first and cheaply.

How: every case runs once in the launch probe's ``launch`` mode (GPU only, no CPU reference,
engine.verdict.launch_program) with no sanitizer and ``KVDIAG_PRINT_LAUNCHES=1``, hundreds of cases
per process on a terminal; parse.case_segments gives each case its own launch lines. The
launch-proof gate (engine.evidence.launch_proof, with the entry's family regexes as for one case of a
scan) then sorts each case that printed OK:

* reached: it launched a kernel of the entry's family; the detect phase sanitizes it exactly
  as a scan without routing does (engine.scan.cases);
* not reached: it gets the verdict a scan without routing gives it (not-applicable, "this case
  launched no kernel the entry is about", naming what it launched), behind the same controls
  gate, without being sanitized; the reason says so.

Every other case goes to the detect phase, never dropped: a FAIL or another status; a case
with no status of its own. When a route process dies or hangs, its first case without a
status is the one it was running (test-backend-ops prints a case after running it), and goes
to the detect phase; its later cases route again in a new process, at most ROUTE_ROUNDS
rounds, after which they go to the detect phase too. A route process that could not start at all
(an exec error: on the H200 a regex over Linux's per-argument limit) says nothing about its cases:
they go to the detect phase unrouted but in its ordinary batches, not one per process, and the phase
names the error once. A route process's `-p` regex stays under scan_batch.MAX_PATTERN_BYTES.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kvdiag.engine.verdict.devices import describe
from kvdiag.engine.scan.dispatch import dispatch
from kvdiag.controls.gate import GateProvider
from kvdiag.engine.evidence.launch_proof import launch_context
from kvdiag.engine.verdict.devices import gpu_lease
from kvdiag.engine.verdict.planning import RunOptions, plan_step
from kvdiag.engine.verdict.launch_program import lister_for, program_for, with_lister, with_program
from kvdiag.engine.evidence.launch_proof import LaunchJudgement, judge_launch
from kvdiag.engine.verdict.planning import TemplateProblem
from kvdiag.engine.verdict.presence import with_range
from kvdiag.engine.scan.batch import deal
from kvdiag.engine.scan.batch import batch_regex, batch_timeout, cases_per_pattern
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.parse.case_segments import CaseSegment, split_cases
from kvdiag.parse.launches import LISTER_READY, confirmed_listing, distinct_kernels
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir
from kvdiag.workspace.launch_lister import LISTER_NAME

ROUTE_MAX_BATCH = 512     # cases per route process: a bare launch-mode case costs little, a process start much more
ROUTE_ROUNDS = 3          # route processes a case may be dealt to before it goes to the detect phase unrouted


def route_step(step: Step) -> Step:
    """The scan step as the route phase runs it: no sanitizer, on a terminal (a case's status line
    then reaches the stream before the next case's launches, so each case keeps its own)."""
    return dataclasses.replace(step, sanitizer=None, sanitizer_options=(), kernel_filter=None, print_limit=None,
                               tty=True)


def route_batch_size(n_cases: int, workers: int, most: int = ROUTE_MAX_BATCH) -> int:
    """One route process per worker, at most ``most`` cases each (dealt as the detect phase's
    batches are, engine.scan.batch.deal, so the heavy shapes spread over the processes)."""
    if n_cases <= 0 or workers <= 0:
        return 1
    return max(1, min(most, math.ceil(n_cases / workers)))


@dataclass(frozen=True)
class RouteUnit:
    cases: tuple[tuple[int, str], ...]      # (index, params), in the order test-backend-ops walks them
    round: int = 1


@dataclass
class RoutedBatch:
    """What one route process showed: its cases sorted into the three kinds, and those to route again."""

    routed: dict[str, Attempt] = field(default_factory=dict)     # not reached: judged without the sanitizer
    reached: list[str] = field(default_factory=list)             # to sanitize (the detect phase)
    unrouted: dict[str, str] = field(default_factory=dict)       # to sanitize without a route: why
    launched: dict[str, tuple[str, ...]] = field(default_factory=dict)   # every case that printed OK: its kernels
    again: list[tuple[int, str]] = field(default_factory=list)   # to route again in a new process
    row: dict[str, Any] = field(default_factory=dict)
    not_started: str | None = None                               # the exec error of a process that never ran


@dataclass
class RouteOutcome:
    """The whole route phase."""

    routed: dict[str, Attempt] = field(default_factory=dict)
    reached: dict[str, None] = field(default_factory=dict)       # ordered set
    unrouted: dict[str, str] = field(default_factory=dict)
    launched: dict[str, tuple[str, ...]] = field(default_factory=dict)
    processes: int = 0
    wall_s: float = 0.0
    batches: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    cases: int = 0
    not_started: dict[str, None] = field(default_factory=dict)   # unrouted because their process could not start
    start_errors: list[str] = field(default_factory=list)        # each such process's exec error

    def absorb(self, batch: RoutedBatch, on_case: Callable[[str, Attempt], None] | None = None) -> None:
        """Take one process's answer (once: a Ctrl-C may hand the same answer again)."""
        for params, attempt in batch.routed.items():
            if params not in self.routed:
                self.routed[params] = attempt
                if on_case:
                    on_case(params, attempt)
        self.reached.update(dict.fromkeys(batch.reached))
        for params, why in batch.unrouted.items():
            self.unrouted.setdefault(params, why)
        self.launched.update(batch.launched)
        if batch.row and batch.row not in self.batches:
            self.batches.append(batch.row)
            if batch.not_started:
                self.start_errors.append(batch.not_started)
                self.not_started.update(dict.fromkeys(batch.unrouted))

    def alone(self) -> tuple[str, ...]:
        """The unrouted cases the detect phase runs one per process: those the route phase saw fail or end
        their process; never those whose route process could not start (that says nothing of them)."""
        return tuple(case for case in self.unrouted if case not in self.not_started)

    def start_failure(self) -> str | None:
        """The route processes that could not start, in one line (None when every one started)."""
        if not self.start_errors:
            return None
        return (f"{len(self.start_errors)} route process(es) could not start ({self.start_errors[0]}); their "
                f"{len(self.not_started)} case(s) go to the detect phase unrouted, in batches")

    def summary(self, entry_id: str, detect: int) -> str:
        """The phase's counts in one line, with the ``detect`` cases it hands to the sanitizer."""
        return (f"route: {len(self.reached)} case(s) reach {entry_id}'s kernels, {len(self.routed)} do not (judged "
                f"without the sanitizer), {len(self.unrouted)} unrouted; detect: {detect} case(s) under the sanitizer")

    def to_detect(self, order: Sequence[str]) -> tuple[str, ...]:
        """The cases the detect phase sanitizes (reached, and unrouted), in the listing's order."""
        chosen = set(self.reached) | set(self.unrouted)
        return tuple(p for p in order if p in chosen)

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "processes": self.processes, "wall_s": round(self.wall_s, 3),
                "reached": len(self.reached), "not_reached": len(self.routed), "unrouted": dict(self.unrouted),
                "batches": list(self.batches), "not_started": len(self.not_started),
                "start_failure": self.start_failure()}


def route(entry: Entry, step: Step, target: Target, run_dir: RunDir, *, cases: Sequence[str], workers: int,
          devices: Sequence[Any], gate_provider: GateProvider, cancel: threading.Event,
          on_case: Callable[[str, Attempt], None] | None = None, most: int = ROUTE_MAX_BATCH,
          on_batch: Callable[[RoutedBatch], None] | None = None) -> RouteOutcome:
    """Run the route phase over ``cases`` (``workers`` per device, engine.scan.dispatch), at most ``most``
    cases per process. ``on_batch``: called with each process's answer once it is taken (not with
    what a Ctrl-C salvages), so an overlapped detect phase can start on its cases (engine.scan.overlap)."""
    numbered = list(enumerate(cases, start=1))
    size = min(route_batch_size(len(numbered), workers * max(1, len(devices)), most), cases_per_pattern(cases))
    units = [RouteUnit(tuple(unit)) for unit in deal(numbered, size)]
    out = RouteOutcome(cases=len(numbered))
    numbers = itertools.count(1)
    started = time.monotonic()

    def start(unit: RouteUnit, device: Any):
        out.processes += 1
        number = next(numbers)
        options = RunOptions(cancel=cancel, device=device, scan_case=True)
        return lambda: route_batch(entry, step, target, run_dir, number=number, unit=unit, options=options,
                                   gate_provider=gate_provider)

    def finish(unit: RouteUnit, batch: RoutedBatch, device: Any) -> list[RouteUnit]:
        out.absorb(batch, on_case)
        if on_batch is not None:
            on_batch(batch)
        return [RouteUnit(tuple(batch.again), unit.round + 1)] if batch.again else []

    def not_started(unit: RouteUnit) -> None:     # cancelled while it waited for its turn: no process
        out.processes -= 1

    out.interrupted = dispatch(units, start, finish, workers=workers, devices=devices, cancel=cancel,
                               salvage=out.absorb, name="kvdiag-route",      # salvage: no progress, as in scan
                               not_started=not_started)
    out.wall_s = time.monotonic() - started
    return out


def route_batch(entry: Entry, step: Step, target: Target, run_dir: RunDir, *, number: int, unit: RouteUnit,
                options: RunOptions, gate_provider: GateProvider) -> RoutedBatch:
    """One route process over ``unit``'s cases, and what it says about each."""
    name = f"route{number:03d}"
    params = [p for _, p in unit.cases]
    out = RoutedBatch()
    rstep = route_step(step)
    try:
        planned = plan_step(entry, rstep, target, run_dir, dataclasses.replace(
            options, overrides={**options.overrides, "params": batch_regex(params)}))
    except TemplateProblem as exc:
        return _unrouted(out, params, f"the route process could not be planned: {exc}")
    program = program_for(rstep, target)
    library = lister_for(rstep, target) if program is None else None
    if program is not None:
        planned = with_program(planned, program, launch_mode=True)
    elif library is not None:       # the user's program in test mode, its launches named by the CUPTI lister
        planned = with_lister(planned, library)
    else:
        return _unrouted(out, params, "neither the launch probe's program nor the CUPTI launch lister is available "
                                      "to route with")
    started = time.monotonic()
    try:
        with gpu_lease(entry, target, options):
            started = time.monotonic()      # the route process's wall is its own, not its wait for a turn
            result = run_command(tuple(planned.commands[0]), timeout=batch_timeout(step, len(params)),
                                 log_dir=run_dir.logs, name=name, env_overrides=planned.env or None, tty=True,
                                 cancel=options.cancel, quiet_timeout=step.timeout)
    except CommandInterrupted:
        return out      # Ctrl-C: its cases stay unrouted and unrun (listed as not run); the log is on disk
    except CommandNotFound as exc:     # nothing ran: a harness problem, not the cases'
        out.not_started = str(exc)
        out.row = {"log": str(run_dir.logs / f"{name}.cmd.json"), "cases": len(params), "round": unit.round,
                   "wall_s": 0.0, "exit": f"not started: {exc}", "reached": 0, "not_reached": 0,
                   "unrouted": len(params), "again": 0, "device": getattr(options.device, "index", None)}
        return _unrouted(out, params, f"its route process could not start: {exc}")
    wall = time.monotonic() - started
    text = strip_ansi(result.stdout_text())
    if library is not None and confirmed_listing(LISTER_NAME, text) is None:
        return _unrouted(out, params, f"the CUPTI launch lister did not say it was listing in {name} (no "
                                      f"'{LISTER_READY}<version>' line): its cases are sanitized unrouted")
    split = split_cases(text, None)
    finished = split.backend_ops.finished and not result.timed_out
    context = launch_context(target, per_case=True)
    judge = _CaseJudge(entry, step, gate_provider, target.range_evidence(entry),
                       describe(options.device) if options.device is not None else None, wall / max(1, len(params)),
                       str(run_dir.logs), result, LISTER_NAME if library is not None else "launch probe")
    missing: list[tuple[int, str]] = []
    for index, case in unit.cases:
        segment = split.segment(case)
        if segment is None:
            missing.append((index, case))
        elif segment.case.status != "OK":
            mode = "launch mode" if library is None else "test mode"
            out.unrouted[case] = f"{segment.case.status} in {mode} without {step.sanitizer} ({name})"
        else:
            out.launched[case] = distinct_kernels(segment.launches)
            judged = judge_launch(entry, segment.launches, True, context, tool=step.sanitizer)
            if judged.verdict is None:
                out.reached.append(case)
            else:
                out.routed[case] = judge.attempt(index, segment, judged)
    _missing(out, missing, finished, unit.round, f"{name} {result.describe()}")
    out.row = {"log": str(run_dir.logs / f"{name}.stdout.log"), "cases": len(params), "round": unit.round,
               "wall_s": round(wall, 3), "exit": result.describe(), "reached": len(out.reached),
               "not_reached": len(out.routed), "unrouted": len(out.unrouted), "again": len(out.again),
               "device": getattr(options.device, "index", None)}
    return out


def _missing(out: RoutedBatch, missing: list[tuple[int, str]], finished: bool, round_: int, ended: str) -> None:
    """Cases without a status of their own. A process that finished walked past them: to the detect
    phase. One that died or hung was running the first of them (to the detect phase); the rest route
    again, until ROUTE_ROUNDS rounds were spent."""
    if not missing:
        return
    if finished:
        for _, case in missing:
            out.unrouted[case] = f"no status of its own in a route process that finished ({ended})"
        return
    (_, first), rest = missing[0], missing[1:]
    out.unrouted[first] = f"the route process ended while running it ({ended})"
    if round_ < ROUTE_ROUNDS:
        out.again.extend(rest)
        return
    for _, case in rest:
        out.unrouted[case] = f"not reached by {ROUTE_ROUNDS} route processes (the last: {ended})"


def _unrouted(out: RoutedBatch, params: Sequence[str], why: str) -> RoutedBatch:
    out.unrouted.update(dict.fromkeys(params, why))
    return out


@dataclass(frozen=True)
class _CaseJudge:
    """The verdict of a case the route phase showed reaching none of the entry's kernels: what a scan
    without routing gives it (the controls gate first, then the launch-proof gate's not-applicable),
    its reason saying that it was not sanitized."""

    entry: Entry
    step: Step
    gate_provider: GateProvider
    presence: Any
    device: Any
    share_s: float
    log_dir: str
    result: Any
    lister: str = "launch probe"

    def attempt(self, index: int, segment: CaseSegment, judged: LaunchJudgement) -> Attempt:
        tool = self.step.sanitizer
        mode = "launch mode" if self.lister == "launch probe" else "test mode"
        ran = f"1 matching case(s) executed in {mode} without {tool} (1 OK)"
        gate = self.gate_provider(tool)
        if not gate.allowed:
            verdict, reason = Verdict.INCONCLUSIVE, f"{ran}; not sanitized: {judged.text}, but {gate.reason}"
        else:
            verdict, reason = judged.verdict, f"{ran}; routed, not sanitized: {judged.text}"
            if verdict is Verdict.NOT_APPLICABLE:
                reason = with_range(reason, self.presence)
        evidence = Evidence(launched=distinct_kernels(segment.launches), launch_listing=f"{self.lister} (route phase)",
                            launch_proof=judged.text, cases_matched=1, cases_executed=1, cases_failed=0,
                            cases_not_supported=0, last_finished_case=segment.case.params)
        command = dict(self.result.to_dict())
        command["batch_lines"] = [segment.start_line, segment.end_line]
        return Attempt(step=self.step.name, index=index, verdict=verdict, reason=reason, evidence=evidence,
                       commands=(command,), duration_s=self.share_s, log_dir=self.log_dir, device=self.device)
