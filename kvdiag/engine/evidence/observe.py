"""What one attempt's processes left behind, parsed once for every matcher and judge.

Logs are read back from the run directory (they were streamed there while the
processes ran), so what is judged is exactly what a user finds on disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kvdiag.parse.aborts import AbortInfo, parse_aborts
from kvdiag.parse.deadline import OutOfTime, time_limit
from kvdiag.parse.backend_ops import BackendOpsReport, parse_backend_ops
from kvdiag.parse.case_segments import CaseSegment, CaseSplit, segment_text
from kvdiag.parse.launches import Launch, confirmed_listing, parse_launches
from kvdiag.parse.sanitizer import MARKER, SanitizerReport, fold_sites, parse_sanitizer
from kvdiag.parse.text import cut_long_lines, strip_ansi
from kvdiag.proc.limit import bounded
from kvdiag.registry.entry import Step

#: what is judged of each output when all of it cannot be: after Ctrl-C, or past `run --timeout`
JUDGED_TAIL = 1_000_000

@dataclass(frozen=True)
class ArmReading:
    """What a step's comparison arm left from its one run: its output, or why it has none to compare.

    ``ran`` is true when the arm ran as a healthy run does (its own attempt, judged with no
    signature, came out not-reproduced); otherwise ``why`` says what happened to it."""

    step: str
    ran: bool
    why: str = ""
    streams: Mapping[str, str] = field(default_factory=dict)   # stdout, stderr, combined
    exit: str | None = None
    logs: tuple[str, ...] = ()
    interrupted: bool = False

    def stream(self, name: str) -> str:
        return self.streams.get(name, "")


@dataclass(frozen=True)
class Observations:
    """Parsed output of one attempt of one step."""

    step: Step
    results: tuple[Any, ...]                 # CommandResult of each command, in order
    stdout: str
    stderr: str
    combined: str
    sanitizer_text: str
    sanitizer: SanitizerReport | None
    backend_ops: BackendOpsReport | None
    aborts: tuple[AbortInfo, ...]
    stale: bool | None = None
    stale_detail: str = ""
    budget_s: float | None = None            # the step's time budget (engine.verdict.budget), when it ran commands
    # the step's comparison arm, read (and run, the first time) only when a relative matcher asks
    comparison: Callable[[], ArmReading] | None = None
    launches: tuple[Launch, ...] = ()        # the launch probe's lines (kvdiag.parse.launches)
    launch_listed: bool = False              # the program printed its launches (the probe's build, asked to)
    lines_cut: int = 0                       # lines over kvdiag.parse.text.LINE_LIMIT, cut before judging
    tail_only: int | None = None             # only this many characters at each stream's end were judged
    tail_why: str = "after the interruption"
    launch_lister: str | None = None         # which lister printed them: "launch probe" | "CUPTI injection"

    @property
    def last(self):
        return self.results[-1] if self.results else None

    def stream(self, name: str) -> str:
        return {"stdout": self.stdout, "stderr": self.stderr, "combined": self.combined,
                "sanitizer": self.sanitizer_text}[name]

    @property
    def timed_out(self) -> bool:
        return any(r.timed_out for r in self.results)

    @property
    def interrupted(self) -> bool:
        return any(r.interrupted for r in self.results)


def observe(step: Step, results: Sequence[Any], sanitizer_logs: Sequence[Path],
            budget_s: float | None = None, launch_listed: bool | str | None = False,
            tail_only: int | None = None) -> Observations:
    """Read and parse the logs of an attempt's commands, each line cut to LINE_LIMIT (parse.text).

    ``tail_only``: read only the last that many characters of each stream, from a line's start (an
    attempt stopped by Ctrl-C is judged at once, not after a pass over gigabytes, issue 43). Under a
    ceiling on the run's children (`run --timeout`, kvdiag.proc.limit) the reading gets as long:
    past it, only the last JUDGED_TAIL characters are read, and the verdict says so."""
    limit = bounded(math.inf)
    if tail_only is not None or not math.isfinite(limit):
        return _observe(step, results, sanitizer_logs, budget_s, launch_listed, tail_only)
    try:
        with time_limit(limit):
            return _observe(step, results, sanitizer_logs, budget_s, launch_listed, None)
    except OutOfTime:
        return replace(_observe(step, results, sanitizer_logs, budget_s, launch_listed, JUDGED_TAIL),
                       tail_why=f"(reading all of it passed the --timeout of {limit:g} s)")


def _observe(step: Step, results: Sequence[Any], sanitizer_logs: Sequence[Path], budget_s: float | None,
             launch_listed: bool | str | None, tail_only: int | None) -> Observations:
    def read(text: str) -> tuple[str, int]:
        if tail_only is not None and len(text) > tail_only:
            text = text[-tail_only:].partition("\n")[2]
        return cut_long_lines(text)

    stdout = read(strip_ansi("".join(r.stdout_text() for r in results)))[0]   # matchers see the printed words,
    stderr = read(strip_ansi("".join(r.stderr_text() for r in results)))[0]   # as in the combined stream
    combined, cut = read(strip_ansi("".join(r.combined_text() for r in results)))
    sanitizer_text, cut_sanitizer = read("".join(p.read_text(errors="replace") for p in sanitizer_logs
                                                 if p.exists()))
    sanitizer = parse_sanitizer(sanitizer_text, tool=step.sanitizer) if step.sanitizer else None
    backend = parse_backend_ops(stdout) if step.kind == "backend-ops" else None
    lister = confirmed_listing(launch_listed, stdout)
    return Observations(
        step=step, results=tuple(results), stdout=stdout, stderr=stderr, combined=combined,
        sanitizer_text=sanitizer_text, sanitizer=sanitizer, backend_ops=backend,
        aborts=tuple(parse_aborts(combined)), budget_s=budget_s,
        launches=parse_launches(stdout) if lister else (), launch_listed=bool(lister), launch_lister=lister,
        lines_cut=cut + cut_sanitizer, tail_only=tail_only,
    )


def observe_staleness(step: Step, stale: bool | None, detail: str) -> Observations:
    """A build-check step runs nothing: its observation is the staleness dry run."""
    return Observations(step=step, results=(), stdout="", stderr="", combined=detail, sanitizer_text="",
                        sanitizer=None, backend_ops=None, aborts=(), stale=stale, stale_detail=detail)


def observe_segment(step: Step, text: str, split: CaseSplit, segment: CaseSegment,
                    launch_listed: bool | str | None = False) -> Observations:
    """One case's share of a process that ran several (a scan batch), observed as if it
    had run alone: its own lines, its own findings, and the tool's count for them.

    The process's exit status is not the case's (another case's findings set it), so
    no command result is attached; the caller only judges a case this way when the
    process finished its report and the split accounted for every error it counted."""
    from dataclasses import replace

    own = segment_text(text, segment, split.lines)
    report = None
    if split.sanitizer is not None:
        report = replace(split.sanitizer, findings=segment.findings, sites=fold_sites(segment.findings),
                         error_count=segment.error_count, not_printed=None, racecheck=None)
    backend = replace(split.backend_ops, cases=(segment.case,), running_case=None) if split.backend_ops else None
    sanitizer_text = "".join(line for line in own.splitlines(keepends=True) if MARKER in line)
    lister = confirmed_listing(launch_listed, text)
    return Observations(step=step, results=(), stdout=own, stderr="", combined=own, sanitizer_text=sanitizer_text,
                        sanitizer=report, backend_ops=backend, aborts=(),
                        launches=segment.launches if lister else (), launch_listed=bool(lister), launch_lister=lister)
