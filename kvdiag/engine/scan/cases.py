"""`kvdiag scan`: the blast radius of a defect, judged case by case.

A diverging FlashAttention case ends a test-backend-ops process under the sanitizer's
default settings, and a single process walking the whole space with its report in a
separate file cannot say which case produced which finding (docs/performance.md has
the measurement). So the scan lists the case space with
`test-backend-ops support` (no kernel runs) and runs the supported cases in parallel
workers that each hold a slot of their GPU's pool: in batches of several cases per
process, the report interleaved with the cases' status lines on a terminal so that
every finding lands in its case (`scan_batch`, `parse.case_segments`), or one process
per case (`--batch 1`, and any case a batch cannot judge). It aggregates per case:
affected, unaffected, inconclusive, not supported.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kvdiag.engine.scan.dispatch import UnitFeed, dispatch
from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.attempt import attempt_step
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.planning import escape_params
from kvdiag.engine.scan.batch import (
    BatchOutcome,
    auto_batch_size,
    batch_step,
    batchable,
    cases_per_pattern,
    deal,
    run_batch,
)
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.errors import CaseListingFailed, UsageError
from kvdiag.exitcodes import ExitCode
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.proc.runner import run_command
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

ENUMERATE_TIMEOUT_S = 300


@dataclass(frozen=True)
class CaseSpace:
    op: str
    params: str
    supported: tuple[str, ...]          # parameter strings
    not_supported: tuple[str, ...]
    listed: tuple[str, ...] = ()        # every case of the op, in the order test-backend-ops walks them


@dataclass
class ScanResult:
    entry_id: str
    space: CaseSpace
    workers: int
    results: dict[str, Attempt] = field(default_factory=dict)   # params -> attempt
    wall_s: float = 0.0
    interrupted: bool = False
    sanitizer_output: str | None = None   # the scan's own print limit / options, when it sets them
    batch_size: int = 1                   # cases per process (1: one process per case)
    processes: int = 0                    # test-backend-ops processes started (batches and single cases)
    batches: list[dict[str, Any]] = field(default_factory=list)
    run_dir: Path | None = None           # where the scan's run.json and logs are
    range: Any = None                     # RangeEvidence: what the entry's affected ranges say about the tree
    shard: str | None = None              # "i/n": this scan ran the cases of shard i (kvdiag.shards.case_shard)
    shard_from: dict[str, Any] | None = None   # --shard auto: the job engine and its variables
    selection: tuple[str, ...] = ()       # a shard's whole selection: every case before sharding
    started_at: str = ""
    target: dict[str, Any] | None = None  # the target as saved (Target.to_dict()), set by the session
    program: dict[str, Any] | None = None  # which test-backend-ops ran the cases (engine.verdict.launch_program)
    # kvdiag's own CPU seconds (every thread, no child) from the result's making to its saving: what
    # reading and judging the processes' output cost the harness, beside the wall (the GIL makes it serial)
    cpu_started: float = field(default_factory=time.process_time)
    kernels: dict[str, Any] | None = None  # the cases by kernel instantiation (engine.scan.kernels)
    space_source: str | None = None        # where the case space came from (--params, the radius, [scan])
    phases: dict[str, Any] | None = None   # routed or not, and each phase's cases, processes, wall (engine.scan.phases)

    def not_started(self, unit: Any) -> None:
        """A unit handed out whose process never started (cancelled before its turn: kvdiag.proc.turns)."""
        self.processes -= 1

    def by_verdict(self, verdict: Verdict) -> list[tuple[str, Attempt]]:
        return [(p, a) for p, a in self.results.items() if a.verdict is verdict]

    @property
    def affected(self) -> list[tuple[str, Attempt]]:
        return self.by_verdict(Verdict.CONFIRMED)

    @property
    def sum_case_s(self) -> float:
        return sum(a.duration_s for a in self.results.values())

    def sites(self) -> dict[str, dict[str, Any]]:
        """Distinct file:line sites over affected cases: cases counted once, printed findings and
        the sanitizer's error counts summed (one site line can belong to several instantiations)."""
        out: dict[str, dict[str, Any]] = {}
        for params, attempt in self.affected:
            seen_here: set[str] = set()
            for site in attempt.evidence.sites:
                row = out.setdefault(site["site"], {"site": site["site"], "kind": site["kind"], "cases": 0,
                                                    "printed": 0, "errors": 0})
                row["printed"] += site["count"]
                if site["site"] not in seen_here:
                    seen_here.add(site["site"])
                    row["cases"] += 1
                    row["errors"] += attempt.evidence.error_count or 0
        return out

    def instantiations(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, attempt in self.affected:
            for inst in attempt.evidence.instantiations:
                out[inst] = out.get(inst, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry_id, "op": self.space.op, "params": self.space.params, "workers": self.workers,
            "wall_s": round(self.wall_s, 3), "sum_case_s": round(self.sum_case_s, 3),
            "harness_cpu_s": round(time.process_time() - self.cpu_started, 3),
            "interrupted": self.interrupted, "sanitizer_output": self.sanitizer_output,
            "batch_size": self.batch_size, "processes": self.processes, "batches": list(self.batches),
            "ran_alone_after_batch": self.ran_alone(),
            "cases": {p: {"verdict": a.verdict.value, "reason": a.reason, "error_count": a.evidence.error_count,
                          "sites": [s["site"] for s in a.evidence.sites],
                          "instantiations": list(a.evidence.instantiations),
                          "duration_s": round(a.duration_s, 3), "device": dict(a.device) if a.device else None,
                          **({"launched": list(a.evidence.launched), "launch_listing": a.evidence.launch_listing}
                             if a.evidence.launch_listing else {})}
                      for p, a in sorted(self.results.items())},
            "not_supported": list(self.space.not_supported),
            "not_run": [p for p in self.space.supported if p not in self.results],
            "sites": list(self.sites().values()),
            "instantiations": self.instantiations(),
            "counts": {v.value: len(self.by_verdict(v)) for v in Verdict},
            "devices": self.per_device(),
            **({"range": self.range.to_dict()} if self.range is not None else {}),
            "started_at": self.started_at,
            "shard": self.shard,
            "shard_from": self.shard_from,
            **({"selection": list(self.selection)} if self.shard else {}),
            "program": self.program, "kernels": self.kernels, "space_source": self.space_source,
            "phases": self.phases,
        }

    def ran_alone(self) -> int:
        """Cases that a batch handed back and that then ran one per process."""
        return sum(b["again"] for b in self.batches)

    def per_device(self) -> dict[str, dict[str, Any]]:
        """Cases and affected cases per GPU, when the scan was spread over several."""
        out: dict[str, dict[str, Any]] = {}
        for attempt in self.results.values():
            if not attempt.device:
                continue
            key = f"{attempt.device['index']} {attempt.device.get('uuid') or ''}".strip()
            row = out.setdefault(key, {"device": dict(attempt.device), "cases": 0, "affected": 0, "case_s": 0.0})
            row["cases"] += 1
            row["affected"] += attempt.verdict is Verdict.CONFIRMED
            row["case_s"] = round(row["case_s"] + attempt.duration_s, 3)
        return out


def scan_exit_code(counts: dict[str, int], interrupted: bool = False) -> int:
    """`kvdiag scan`'s (and a merged scan's) exit code from its verdict counts: 130 interrupted,
    1 if any case is affected, 4 if none is but some case was inconclusive, else 0."""
    if interrupted:
        return int(ExitCode.INTERRUPTED)
    if counts.get(Verdict.CONFIRMED.value):
        return int(ExitCode.CONFIRMED)
    return int(ExitCode.INCONCLUSIVE) if counts.get(Verdict.INCONCLUSIVE.value) else int(ExitCode.OK)


def enumerate_cases(target: Target, op: str, params: str, run_dir: RunDir, backend: str = "CUDA0") -> CaseSpace:
    """The case space, from `test-backend-ops support` (it runs no kernel)."""
    binary = target.build.binary("test-backend-ops") if target.build is not None else None
    if binary is None:
        raise UsageError("scan needs the build's test-backend-ops")
    result = run_command([str(binary), "support", "-o", op, "-b", backend, "-p", params],
                         timeout=ENUMERATE_TIMEOUT_S, log_dir=run_dir.logs, name="enumerate", tty=True)
    report = parse_backend_ops(result.stdout_text())
    if not result.ok and not any(c.op == op for c in report.cases):
        raise CaseListingFailed(f"`test-backend-ops support` could not list the {op} cases "
                                f"({result.describe()}): {_last_line(result)}")
    supported = tuple(c.params for c in report.cases if c.op == op and c.status == "SUPPORTED")
    unsupported = tuple(c.params for c in report.cases if c.op == op and c.status == "NOT_SUPPORTED")
    listed = tuple(c.params for c in report.cases if c.op == op)
    return CaseSpace(op=op, params=params, supported=supported, not_supported=unsupported, listed=listed)


def _last_line(result) -> str:
    """The program's own last words: a loader's "symbol lookup error", an abort message."""
    lines = [ln.strip() for ln in (result.combined_text() or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "it printed nothing"


def exact_case_regex(params: str) -> str:
    """A -p regex that matches exactly one case's parameter string."""
    return "^" + escape_params(params) + "$"


def scan_step(entry: Entry) -> Step:
    """The step a scan runs per case: the entry's scan step, with the scan's own sanitizer
    output settings when it declares them.

    A scan needs "is this case hit, where, in which instantiation", not every finding
    with its backtrace. Measured on an H200 (ggml d99724f2, D2's fast case under synccheck):
    `--print-limit 1 --show-backtrace no` took an affected case from 2.6 s to 1.4 s alone,
    and 8 at once from 9.7 s to 3.1 s; the printed finding still carries the site and the
    instantiation. The sanitizer's error count then differs (257 against 2048 for the same
    case), so a scan's counts compare with other scans, not with `kvdiag run`.
    """
    step = entry.step(entry.scan.step) if entry.scan else entry.default_step
    if entry.scan and entry.scan.print_limit is not None:
        step = dataclasses.replace(step, print_limit=int(entry.scan.print_limit))
    if entry.scan and entry.scan.sanitizer_options is not None:
        step = dataclasses.replace(step, sanitizer_options=entry.scan.sanitizer_options)
    return step


def _output_note(entry: Entry, step: Step, batch_size: int = 1) -> str | None:
    """How the scan asks the sanitizer to print (and what it instruments), when that differs from `kvdiag run`."""
    note = _print_note(entry, step, batch_size)
    if step is not None and step.sanitizer and step.kernel_filter:
        only = (f"only kernels whose mangled name contains {step.kernel_filter} are instrumented "
                f"(--kernel-name kns={step.kernel_filter})")
        note = f"{note}; {only}" if note else only
    return note


def _print_note(entry: Entry, step: Step, batch_size: int) -> str | None:
    alone = None
    if entry.scan and (entry.scan.print_limit is not None or entry.scan.sanitizer_options is not None):
        limit = f"--print-limit {step.print_limit}" if step.print_limit is not None else ""
        alone = " ".join(x for x in (limit, " ".join(step.sanitizer_options)) if x)
    if batch_size > 1 and step.sanitizer:
        batched = " ".join(batch_step(step).sanitizer_options)
        text = (f"up to {batch_size} cases per process, --print-limit 0 {batched}; a case counts the errors "
                f"printed between its status line and the previous one")
        if alone:
            text += f"; a case a batch hands back runs alone with {alone}"
        return text + f" (error counts compare with other scans of {entry.id}, not with `kvdiag run`)"
    if alone is None:
        return None
    return (f"per case {alone} (the scan's own settings: error counts "
            f"compare with other scans of {entry.id}, not with `kvdiag run`)")


def scan(entry: Entry, target: Target, run_dir: RunDir, *, space: CaseSpace, workers: int,
         gate_provider: GateProvider, on_case: Callable[[str, Attempt], None] | None = None,
         limit: int | None = None, devices: Sequence[Any] = (), batch: int = 1,
         kernel_filter: str | None = None, cancel: threading.Event | None = None,
         alone: Sequence[str] = (), in_order: bool = False,
         feed: UnitFeed[list[tuple[int, str]]] | None = None) -> ScanResult:
    """Run the entry's scan step over the supported cases with `workers` in parallel.

    `workers` is per device: each unit of work is handed to the device with the fewest
    units in flight, pinned to it, and names it (with one device too, so that
    `--devices 1` means GPU 1 and every case says where it ran; engine.scan.dispatch). `batch`
    is how many cases one process runs (1: one process per case; 0: as many as spreads the
    cases evenly over the workers, see scan_batch), never more than keep its one `-p` regex
    under scan_batch.MAX_PATTERN_BYTES; a case a batch cannot judge runs again alone.
    `kernel_filter`: the sanitizer instruments only the kernels whose mangled name
    contains it (`--kernel-name kns=`). `alone`: cases that run one per process from the start
    (the route phase saw them fail or end their process; in a batch they would only cost the
    batch). `in_order`: batches take the cases as given, consecutively, instead of dealt round
    robin (the caller ordered them: engine.scan.phases groups them by kernel). `feed`: the units
    arrive through it while the scan runs, formed by the caller (engine.scan.overlap) with
    detect_batch_size, instead of from the cases; `space.supported` then lists every case that may
    arrive, numbered as the units number them. Ctrl-C stops handing out work, cancels the running
    processes (their groups are killed by the runner) and returns what finished; the caller
    records it.
    """
    step = detect_step(entry, kernel_filter)
    cases: Sequence[str] = space.supported[:limit] if limit else space.supported
    numbered = list(enumerate(cases, start=1))
    all_workers = workers * max(1, len(devices))
    size = detect_batch_size(step, cases, batch, all_workers)
    result = ScanResult(entry_id=entry.id, space=space, workers=all_workers, batch_size=size,
                        sanitizer_output=_output_note(entry, step, size))
    cancel = cancel or threading.Event()
    started = time.monotonic()
    index_of = dict((p, i) for i, p in numbered)
    numbers = itertools.count(1)

    def one(index: int, params: str, device: Any) -> dict[str, Attempt]:
        options = RunOptions(overrides={"params": exact_case_regex(params)}, cancel=cancel, device=device,
                             scan_case=True)
        attempt = attempt_step(entry, step, target, run_dir, index, f"{entry.id} case {index}", options,
                               gate_provider, name_prefix=f"case{index:04d}")
        return {params: attempt}

    def several(number: int, unit: list[tuple[int, str]], device: Any) -> BatchOutcome:
        options = RunOptions(cancel=cancel, device=device, scan_case=True)
        return run_batch(entry, step, target, run_dir, number=number, cases=unit, options=options,
                         gate_provider=gate_provider)

    def start(unit: list[tuple[int, str]], device: Any):
        result.processes += 1
        if len(unit) == 1:
            return lambda: one(unit[0][0], unit[0][1], device)
        number = next(numbers)
        return lambda: several(number, unit, device)

    def record(attempts: dict[str, Attempt]) -> None:
        for params, attempt in attempts.items():
            result.results[params] = attempt
            if on_case:
                on_case(params, attempt)

    def finish(unit, outcome, device) -> list[list[tuple[int, str]]]:
        if not isinstance(outcome, BatchOutcome):
            record(outcome)
            return []
        result.batches.append(_batch_row(outcome, device))
        record(outcome.resolved)
        alone_again = [[(index_of[params], params)] for params in outcome.again]
        return alone_again + outcome.split      # before the batches queued

    def salvage(outcome) -> None:
        for params, attempt in (outcome.resolved if isinstance(outcome, BatchOutcome) else outcome).items():
            result.results.setdefault(params, attempt)

    units = units_of(numbered, size, alone, in_order) if feed is None else []
    result.interrupted = dispatch(units, start, finish, workers=workers, devices=devices, cancel=cancel,
                                  salvage=salvage, feed=feed, not_started=result.not_started)
    result.wall_s = time.monotonic() - started
    return result


def detect_step(entry: Entry, kernel_filter: str | None = None) -> Step:
    """The step the scan sanitizes each case with: scan_step, instrumenting only ``kernel_filter``'s kernels."""
    step = scan_step(entry)
    return dataclasses.replace(step, kernel_filter=kernel_filter) if kernel_filter else step


def detect_batch_size(step: Step, cases: Sequence[str], batch: int, all_workers: int) -> int:
    """Cases per process for ``cases``: ``batch`` (0: auto_batch_size over ``all_workers``), 1 for a
    step that cannot batch, never more than keep one -p regex under the kernel's limit."""
    size = auto_batch_size(len(cases), all_workers) if batch == 0 else max(1, batch)
    if size > 1 and not batchable(step):
        size = 1
    return min(size, cases_per_pattern(cases)) if size > 1 else size   # its -p under the kernel's limit


def units_of(numbered: Sequence[tuple[int, str]], size: int, alone: Sequence[str],
             in_order: bool) -> list[list[tuple[int, str]]]:
    """The units of work: the `alone` cases one per process first, then the rest in batches, taken
    consecutively (`in_order`) or dealt round robin."""
    apart = set(alone)
    rest = [case for case in numbered if case[1] not in apart]
    batches = [rest[i:i + size] for i in range(0, len(rest), size)] if in_order else deal(rest, size)
    return [[case] for case in numbered if case[1] in apart] + batches


def _batch_row(outcome: BatchOutcome, device: Any) -> dict[str, Any]:
    split = sum(len(half) for half in outcome.split)
    return {"cases": len(outcome.resolved) + len(outcome.again) + split, "judged": len(outcome.resolved),
            "again": len(outcome.again), "split": split, "why_again": outcome.why_again,
            "wall_s": round(outcome.wall_s, 3),
            "device": getattr(device, "index", None), "log": outcome.log}
