"""What one attempt's processes left behind, parsed once for every matcher and judge, and what it shows.

Logs are read back from the run directory (they were streamed there while the
processes ran), so what is judged is exactly what a user finds on disk. The readings at the
end (a cut log, the case a dead process ran, a different failure, what ran) are what the judge's
rules (:mod:`kvdiag.engine.verdict.judge`) weigh and quote: facts of the output, said once here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kvdiag.parse.aborts import AbortInfo, parse_aborts
from kvdiag.parse.deadline import OutOfTime, time_limit
from kvdiag.parse.backend_ops import BackendOpsReport, parse_backend_ops
from kvdiag.parse.case_segments import CaseSegment, CaseSplit, segment_text
from kvdiag.parse.launches import Launch, confirmed_listing, parse_launches
from kvdiag.parse.sanitizer import MARKER, SanitizerReport, fold_sites, instantiations, parse_sanitizer, site_label
from kvdiag.parse.text import cut_long_lines, strip_ansi
from kvdiag.parse.set_apart import set_apart
from kvdiag.proc.limit import bounded
from kvdiag.proc.sanitizer import SANITIZER_ERROR_EXITCODE
from kvdiag.records.verdict import Evidence
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
    budget_s: float | None = None            # the step's time budget (engine.verdict.processes), when it ran commands
    # the step's comparison arm, read (and run, the first time) only when a relative matcher asks
    comparison: Callable[[], ArmReading] | None = None
    launches: tuple[Launch, ...] = ()        # the launch probe's lines (kvdiag.parse.launches)
    launch_listed: bool = False              # the program printed its launches (the probe's build, asked to)
    lines_cut: int = 0                       # lines over kvdiag.parse.text.LINE_LIMIT, cut before judging
    tail_only: int | None = None             # only this many characters at each stream's end were judged
    tail_why: str = "after the interruption"
    launch_lister: str | None = None         # which lister printed them: "launch probe" | "CUPTI injection"
    # the related entries' sanitizer signatures (Entry.neighbours): their findings are set apart
    neighbours: tuple = ()

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


# --------------------------------------------------------------------------- what the observations show


def log_cut(results: Sequence) -> str | None:
    """What a refused log write cost these commands, in one clause; None when every log is whole."""
    cut = [r for r in results if getattr(r, "log_cut", 0)]
    if not cut:
        return None
    worst = max(cut, key=lambda r: r.log_cut)
    return (f"the log was cut: {worst.log_cut} bytes of output never reached logs/{worst.combined_path.name} "
            f"({worst.log_error or 'the write was refused'})")


def running_case(obs: Observations) -> str | None:
    """The case a dead process was running, as precisely as the output allows.

    Older test-backend-ops printed a case's name before running it (then the
    unfinished line names it); current ggml prints it only after the case ran,
    so an abort can only be placed after the last case that finished. A run of
    exactly one case (scan, or a single-case regex) needs neither.
    """
    report = obs.backend_ops
    if report is None:
        return None
    if report.running_case is not None:
        return report.running_case.case_string
    failed = any(not r.ok for r in obs.results)
    if failed and not report.finished and report.last_case is not None:
        return f"the case after {report.last_case.case_string} (the last one that finished)"
    return None


def sanitizer_problem(obs: Observations) -> str | None:
    """The sanitizer's own failure, or a report it did not finish: either way its silence proves nothing."""
    report = obs.sanitizer
    if report is None:
        return None
    if report.tool_errors:
        return f"compute-sanitizer reported its own failure: {report.tool_errors[0]}"
    if not report.has_summary:
        return "compute-sanitizer did not finish its report (no summary line): its silence proves nothing"
    return None


@dataclass(frozen=True)
class Unreached:
    """Why a test-backend-ops walk reached too few matching cases (``why``, one clause)."""

    why: str
    refused: bool = False      # every matching case printed "not supported": the backend refuses them
    none_listed: bool = False  # the program listed no matching case at all


def unreached_cases(obs: Observations) -> Unreached | None:
    """A walk that ended normally without reaching enough matching cases: all refused by the backend,
    none listed, or fewer executed than ``min_cases``; None when enough ran, or the walk misbehaved."""
    report = obs.backend_ops
    matched = len(report.cases) if report else 0
    if not _quiet_walk(obs):
        return None
    if matched and report.executed == 0:
        return Unreached(f"all {matched} matching case(s) are not supported by this backend", refused=True)
    executed = report.executed if report else 0
    if matched == 0:
        params = obs.step.vars.get("params", "")
        return Unreached(f"no {obs.step.vars.get('op', '')} test case matches /{params}/ in this build (0 cases)",
                         none_listed=True)
    if 0 < executed < obs.step.min_cases:
        return Unreached(f"only {executed} matching case(s) executed, {obs.step.min_cases} needed")
    return None


def _quiet_walk(obs: Observations) -> bool:
    """The walk ended normally without starting a case it did not finish: its counts mean what they say."""
    report = obs.backend_ops
    if report is not None and report.running_case is not None:
        return False  # a case started: whatever happened is not "nothing matched"
    return not abnormal(obs)  # a death or misbehaviour (maybe in an unprinted case): rule 5 shows that


def abnormal(obs: Observations) -> str | None:
    """A failure that is not the signature: a different abort, exit or finding. Findings of a related
    entry's signature (``obs.neighbours``) and racecheck warnings are not different
    (parse.set_apart); the sanitizer's error exit for them is not a failure either."""
    step = obs.step
    last = obs.last
    if step.expect:
        missing = [p for p in step.expect if not re.search(p, obs.combined, re.M)]
        if not missing:
            return None
        unseen = ", ".join(f"/{p}/" for p in missing)
        return f"the path did not run as expected: {unseen} not seen ({last.describe() if last else 'nothing ran'})"
    report = obs.sanitizer
    apart = set_apart(report, obs.neighbours) if report is not None else None
    if report is not None and (report.findings or report.error_count) and apart.different:
        sites = ", ".join(site_label(s) for s in report.sites[:3])
        return f"a different sanitizer finding: {report.error_count or report.printed_count} error(s) at {sites}"
    failing = next((r for r in obs.results if not r.ok), None)
    if failing is None:
        return None
    if report is not None and failing.returncode == SANITIZER_ERROR_EXITCODE and not apart.rest:
        return None
    running = running_case(obs)
    abort = obs.aborts[0].message if obs.aborts else None
    text = f"a different failure: {failing.describe()}"
    if abort:
        text += f" ({abort})"
    if running:
        text += f" while running {running}"
    return text


def set_apart_note(obs: Observations) -> str:
    """What a not-reproduced verdict set apart of the sanitizer's findings, or ``""``."""
    return set_apart(obs.sanitizer, obs.neighbours).note() if obs.sanitizer is not None else ""


def what_ran(obs: Observations) -> str:
    """What executed, for a not-reproduced: the matching cases, the expected path's lines, or the exit."""
    report = obs.backend_ops
    if report is not None:
        return f"{report.executed} matching case(s) executed ({report.passed} OK, {report.failed} FAIL)"
    if obs.step.expect:
        seen = "; ".join(quote_seen(p, obs.combined) for p in obs.step.expect)
        return f"the expected path ran (seen: {seen}; {obs.last.describe()})"
    return f"the command ran to completion ({obs.last.describe()})"


def quote_seen(pattern: str, text: str) -> str:
    """The line an ``expect`` pattern matched, quoted (the pattern itself when it matched no text,
    e.g. a negative lookahead)."""
    m = re.search(pattern, text, re.M)
    if m is None or m.start() == m.end():
        return f"/{pattern}/"
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return repr(text[start:end if end >= 0 else len(text)].strip())


def observed_evidence(obs: Observations) -> Evidence:
    """Everything worth quoting from the output, whatever the verdict (the judge adds what the
    signature matched)."""
    report = obs.sanitizer
    backend = obs.backend_ops
    sites = tuple(
        {"site": site_label(s), "kind": s.kind, "kernel": s.kernel_name, "file": s.file, "line": s.line,
         "count": s.count, "blocks": s.blocks, "template_args": list(s.template_args)}
        for s in (report.sites if report else ())
    )
    failed_cases = tuple(
        {"case": c.case_string, "status": c.status,
         "metrics": [{"name": x.name, "value": x.value, "threshold": x.threshold} for x in c.metrics]}
        for c in (backend.cases if backend else ()) if c.metrics or c.status == "FAIL"
    )
    last = obs.last
    return Evidence(
        error_count=report.error_count if report else None,
        sites=sites,
        instantiations=instantiations(report) if report else (),
        case_metrics=failed_cases,
        aborts=tuple({"kind": a.kind, "message": a.message, "detail": a.detail, "file": a.file, "line": a.line}
                     for a in obs.aborts[:5]),
        running_case=running_case(obs),
        last_finished_case=backend.last_case.params if backend and backend.last_case else None,
        cases_matched=len(backend.cases) if backend else None,
        cases_executed=backend.executed if backend else None,
        cases_failed=backend.failed if backend else None,
        cases_not_supported=backend.not_supported if backend else None,
        exit=last.describe() if last else None,
    )
