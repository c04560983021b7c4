"""One sanitized test-backend-ops process over several cases of one op, and what it says of each.

Discovery runs the suite the way a scan runs an entry's cases (engine.scan.batch): several
cases per process on a terminal, the report interleaved with the cases' status lines,
``--print-limit 0`` and ``--destroy-on-device-error kernel`` so that one case's finding
neither hides nor ends the next, and ``parse.case_segments`` giving each case the findings
printed with it. What differs is what happens when a process cannot be trusted whole:

* it aborted or overran its budget: the cases that printed their status before are judged
  from their share (their lines are complete); the first case without a status was the one
  running and runs again alone; the rest run again, cut in two halves;
* it finished but its report cannot be split (a count that does not add up, findings after the
  last case): the whole batch runs again in two halves;
* a case alone that aborts is judged ``aborted``: the abort is a finding of its own kind at its
  site, beside whatever the sanitizer printed first; a case alone that overruns its budget, or
  whose process could not start, is ``cut`` with the reason. Nothing is dropped.

A process whose launches are listed (the launch probe's lines, for engine.discover.routing) gives each
judged case the number of launch lines in its share and the most shared memory one held. A route
unit (tool ``route``) runs its cases with no sanitizer at all, only to list them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from kvdiag.engine.verdict.devices import device_key, visible_value
from kvdiag.engine.discover.occupancy import ENDED, STARTED
from kvdiag.engine.discover.cases import ABORTED, CLEAN, CUT, FINDINGS, NOT_SUPPORTED, CaseRecord
from kvdiag.engine.discover.findings import CaseFinding, from_abort, from_sanitizer
from kvdiag.engine.discover.frames import shows_backtrace
from kvdiag.engine.verdict.planning import escape_params
from kvdiag.parse.aborts import parse_aborts
from kvdiag.parse.case_segments import CaseSplit, split_cases
from kvdiag.parse.text import cut_long_lines, cut_note, strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.proc.sanitizer import DEVICE_ERROR_TOOLS, SanitizerInvocation
from kvdiag.proc.slots import SlotPool, scan_slots
from kvdiag.proc.turns import process_turn

ROUTE = "route"         # a unit run with no sanitizer, only for its launch lines (engine.discover.routing)
# A finding that destroys only its kernel lets the process go on to the batch's next case; racecheck's
# hazards never end a kernel.
DESTROYS = {tool: "kernel" for tool in DEVICE_ERROR_TOOLS}
# A stopped process's output read for its finished cases at most this large, so that Ctrl-C stays prompt:
# reading is about 0.1 s a MB here (a 70 MB FLASH_ATTN_EXT synccheck log with device frames took 5.8 s),
# and every running process stops at once.
INTERRUPTED_READ_BYTES = 8 << 20


@dataclass(frozen=True)
class Unit:
    """Cases of one op to run in one process under one tool."""

    tool: str
    op: str
    cases: tuple[str, ...]
    round: int = 1

    @property
    def alone(self) -> bool:
        return len(self.cases) == 1


@dataclass(frozen=True)
class Runner:
    """What every discovery process shares."""

    binary: Path
    sanitizer: Path
    log_dir: Path
    case_budget_s: float
    backend: str = "CUDA0"
    memory_bytes: int | None = None
    cancel: Any = None                       # threading.Event set on Ctrl-C
    mode: str = "test"                       # "launch": the launch probe's GPU-only mode (engine.discover.program)
    listed: frozenset[str] = frozenset()     # the tools (or ROUTE) whose processes print their launches
    backtrace: str = "auto"                  # one of frames.BACKTRACES
    racecheck_workers: int | None = None     # racecheck's host threads per process (None: the tool's choice)

    def argv(self, unit: Unit) -> tuple[str, ...]:
        program = [str(self.binary), self.mode, "-o", unit.op, "-b", self.backend, "-p", case_regex(unit.cases)]
        if unit.tool == ROUTE:
            return tuple(program)
        return tool_invocation(unit.tool, self.backtrace, self.racecheck_workers).argv(self.sanitizer, None, program)

    def lists(self, unit: Unit) -> bool:
        return unit.tool in self.listed


@dataclass
class UnitOutcome:
    records: list[CaseRecord] = field(default_factory=list)
    again: list[Unit] = field(default_factory=list)
    row: dict[str, Any] = field(default_factory=dict)


def tool_invocation(tool: str, backtrace: str = "auto", racecheck_workers: int | None = None) -> SanitizerInvocation:
    """Every record printed (``--print-limit 0``), with its device frames unless ``backtrace`` says none
    for this tool: a record without frames names its reporting function as its kernel
    (engine.discover.findings), so an inlined device function's kernel is not known; roots, matching
    and drafts use the function.

    ``racecheck_workers`` sets racecheck's host worker threads (``--racecheck-num-workers``; the tool
    picks its own number for 0 or None). Discovery runs many racecheck processes at once on one host,
    so each one's automatic choice is a guess made as if it were alone (docs/performance.md)."""
    options = ("--show-backtrace", shows_backtrace(tool, backtrace))
    if tool == "racecheck" and racecheck_workers is not None:
        options += ("--racecheck-num-workers", str(racecheck_workers))
    return SanitizerInvocation(tool=tool, options=options,
                               print_limit=0,
                               destroy_on_device_error=DESTROYS.get(tool))


def case_regex(cases: Sequence[str]) -> str:
    """A -p regex matching exactly these parameter strings."""
    return "^(" + "|".join(escape_params(c) for c in cases) + ")$"


def halves(unit: Unit, cases: Sequence[str]) -> list[Unit]:
    """``cases`` of ``unit`` again, in two processes (one when a single case is left)."""
    cases = tuple(cases)
    if not cases:
        return []
    if len(cases) == 1:
        return [Unit(unit.tool, unit.op, cases, unit.round + 1)]
    mid = len(cases) // 2
    return [Unit(unit.tool, unit.op, cases[:mid], unit.round + 1), Unit(unit.tool, unit.op, cases[mid:], unit.round + 1)]


def run_unit(unit: Unit, runner: Runner, *, name: str, device: Any = None) -> UnitOutcome:
    """Run ``unit`` in one process and judge each of its cases from its share (see the module); its row
    says when it started and ended (engine.discover.occupancy: how many ran at once)."""
    started = time.time()
    ran: dict[str, float] = {}
    outcome = _run_unit(unit, runner, name=name, device=device, ran=ran)
    if outcome.row:     # the process's own start and end: a unit may wait for its turn, and judges after
        outcome.row.update({STARTED: round(ran.get(STARTED, started), 2), ENDED: round(ran.get(ENDED, time.time()), 2)})
    return outcome


def _run_unit(unit: Unit, runner: Runner, *, name: str, device: Any = None, ran: dict[str, float]) -> UnitOutcome:
    """``ran``: when its process started and ended (Unix time), filled once it had its turn and its slot."""
    env = {"CUDA_VISIBLE_DEVICES": visible_value(device)} if device is not None else {}
    if runner.lists(unit):
        env["KVDIAG_PRINT_LAUNCHES"] = "1"
    budget = runner.case_budget_s
    started = time.monotonic()
    pool = SlotPool(device_key(device) if device is not None else "gpu0", scan_slots(runner.memory_bytes))
    try:
        with process_turn(), pool.acquire(1, timeout=None):     # its turn among the dispatch's units, then a slot
            started, ran[STARTED] = time.monotonic(), time.time()   # its wall is its process's, not its wait
            try:
                result = run_command(runner.argv(unit), timeout=budget * len(unit.cases), quiet_timeout=budget,
                                     log_dir=runner.log_dir, name=name, env_overrides=env or None, tty=True,
                                     cancel=runner.cancel)
            finally:
                ran[ENDED] = time.time()
    except CommandInterrupted:
        return _all_cut(unit, "interrupted (Ctrl-C) before it was judged", name, started)
    except CommandNotFound as exc:
        if exc.arguments_too_long and not unit.alone:
            return UnitOutcome(again=halves(unit, unit.cases), row=_row(unit, name, started, again=len(unit.cases),
                                                                          why=f"split: {exc}"))
        return _all_cut(unit, f"its process could not start: {exc}", name, started)
    log = str(runner.log_dir / f"{name}.stdout.log")
    if result.interrupted and _size(result.stdout_path) > INTERRUPTED_READ_BYTES:
        mb = _size(result.stdout_path) / (1 << 20)
        return _all_cut(unit, f"interrupted (Ctrl-C) before it was judged; its {mb:.0f} MB of output left unread, "
                              "so that Ctrl-C stays prompt", name, started, log)
    text, cut = cut_long_lines(strip_ansi(result.stdout_text()))     # as every judged output (parse.text)
    split = split_cases(text, None if unit.tool == ROUTE else unit.tool)
    if result.interrupted:
        return judge_interrupted(unit, split, name=name, log=log, wall_s=time.monotonic() - started,
                                 listed=runner.lists(unit))
    outcome = judge_process(unit, split, text, name=name, log=log, wall_s=time.monotonic() - started,
                            timed_out=result.timed_out, ended=result.describe(), budget_s=budget,
                            errors=cut_long_lines(strip_ansi(result.stderr_text()))[0], listed=runner.lists(unit))
    if cut:
        outcome.row["lines_cut"] = cut_note(cut)
    if runner.mode != "test":
        outcome.records = [replace(r, mode=runner.mode) for r in outcome.records]
    return outcome


def judge_process(unit: Unit, split: CaseSplit, text: str, *, name: str, log: str | None, wall_s: float,
                  timed_out: bool, ended: str, budget_s: float, errors: str = "", listed: bool = False) -> UnitOutcome:
    """The cases of one finished (or killed) process: judged, to run again, or cut; pure, so that
    recorded logs re-judge exactly as the run did. ``text``: its terminal (the cases' lines and the
    sanitizer's report); ``errors``: its stderr (where ggml prints an abort); ``listed``: it printed
    its launches, so each judged case's launch lines say what it launched."""
    out = UnitOutcome()
    finished = split.backend_ops.finished and not timed_out
    problems = list(split.problems())
    share = wall_s / max(1, len(unit.cases))
    segments = {case: split.segment(case) for case in unit.cases}
    if finished and unit.alone and segments[unit.cases[0]] is not None and _report_whole(split):
        # One case in the process: every finding is its own, printed before its status or after it.
        case = unit.cases[0]
        out.records.append(_judged(unit, case, segments[case], log, share, findings=split.sanitizer.findings
                                   if split.sanitizer is not None else None, listed=listed))
        out.row = _row(unit, name, None, wall_s=wall_s, judged=1)
        return out
    if finished and not problems:
        missing = [case for case in unit.cases if segments[case] is None]
        for case in unit.cases:
            if segments[case] is not None:
                out.records.append(_judged(unit, case, segments[case], log, share, listed=listed))
        if missing and unit.alone:
            out.records.append(_cut(unit, missing[0], f"no status line of its own ({ended})", log, share))
        else:
            out.again += [Unit(unit.tool, unit.op, (case,), unit.round + 1) for case in missing]
        out.row = _row(unit, name, None, wall_s=wall_s, judged=len(out.records), again=len(missing))
        return out
    if finished:            # the process ended well but its report cannot be split: halves, or alone as it is
        why = "; ".join(problems)
        if unit.alone:
            out.records.append(_cut(unit, unit.cases[0], f"its report could not be read: {why}", log, share))
        else:
            out.again = halves(unit, unit.cases)
        out.row = _row(unit, name, None, wall_s=wall_s, judged=len(out.records), again=len(unit.cases) - len(out.records),
                       why=why)
        return out
    # Aborted or over its budget: the cases with a status are complete; the running one and the rest again.
    done = [case for case in unit.cases if segments[case] is not None]
    rest = [case for case in unit.cases if segments[case] is None]
    for case in done:
        out.records.append(_judged(unit, case, segments[case], log, share, listed=listed))
    why = f"over its budget ({budget_s:.0f} s a case): {ended}" if timed_out else f"the process ended early: {ended}"
    if rest and unit.alone and not done:
        out.records.append(_alone_ended(unit, split, errors + text, log, wall_s, timed_out, why))
    elif rest:
        running, later = rest[0], rest[1:]
        out.again = [Unit(unit.tool, unit.op, (running,), unit.round + 1)] + halves(unit, later)
    out.row = _row(unit, name, None, wall_s=wall_s, judged=len(out.records), again=len(rest) if not unit.alone else 0,
                   why=why)
    return out


def judge_interrupted(unit: Unit, split: CaseSplit, *, name: str, log: str | None, wall_s: float,
                      listed: bool = False) -> UnitOutcome:
    """A process stopped by Ctrl-C (or a deadline): as for one that aborted, each case that printed its
    status is complete (its records come before its status line, as in every batch) and is judged;
    the case that was running and the rest are cut, never run again."""
    why = "interrupted (Ctrl-C) before it was judged"
    out = UnitOutcome()
    share = wall_s / max(1, len(unit.cases))
    for case in unit.cases:
        segment = split.segment(case)
        out.records.append(_judged(unit, case, segment, log, share, listed=listed) if segment is not None
                           else _cut(unit, case, why, log, share))
    judged = sum(1 for r in out.records if r.state != CUT)
    out.row = _row(unit, name, None, wall_s=wall_s, judged=judged, why=why if judged < len(unit.cases) else None)
    return out


def _alone_ended(unit: Unit, split: CaseSplit, text: str, log: str | None, wall_s: float, timed_out: bool,
                 why: str) -> CaseRecord:
    """A case alone whose process did not finish: aborted (its abort a finding at its site), or cut."""
    case = unit.cases[0]
    if timed_out:
        return _cut(unit, case, why, log, wall_s)
    aborts = parse_aborts(text)
    printed = split.sanitizer.findings if split.sanitizer is not None else ()
    if not aborts:
        return _cut(unit, case, f"{why}, printing no abort kvdiag can place", log, wall_s)
    findings = fold([from_sanitizer(f, unit.tool) for f in printed] + [from_abort(a, unit.tool) for a in aborts[:1]])
    return CaseRecord(tool=unit.tool, op=unit.op, params=case, state=ABORTED, status=None, findings=findings,
                      why=why, log=log, lines=None, duration_s=wall_s, alone=True)


def _report_whole(split: CaseSplit) -> bool:
    """The sanitizer finished its report, printed every error it counted and did not fail itself."""
    report = split.sanitizer
    return report is None or (report.has_summary and not report.tool_errors and not report.not_printed)


def _judged(unit: Unit, case: str, segment, log: str | None, share: float, findings=None,
            listed: bool = False) -> CaseRecord:
    findings = fold([from_sanitizer(f, unit.tool) for f in (segment.findings if findings is None else findings)])
    status = segment.case.status
    state = NOT_SUPPORTED if status == "NOT_SUPPORTED" else (FINDINGS if findings else CLEAN)
    launches, shared = (len(segment.launches), most_shared_memory(segment.launches)) if listed else (None, None)
    return CaseRecord(tool=unit.tool, op=unit.op, params=case, state=state, status=status, findings=findings,
                      log=log, lines=(segment.start_line, segment.end_line), duration_s=share, alone=unit.alone,
                      launches=launches, shared_memory=shared)


def most_shared_memory(launches) -> int | None:
    """The most shared memory one launch held (0 for none launched); None when a launch did not say."""
    sizes = [launch.shared_memory for launch in launches]
    return None if None in sizes else max(sizes, default=0)


def _cut(unit: Unit, case: str, why: str, log: str | None, share: float) -> CaseRecord:
    return CaseRecord(tool=unit.tool, op=unit.op, params=case, state=CUT, why=why, log=log, duration_s=share,
                      alone=unit.alone)


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except (OSError, TypeError):
        return 0


def _all_cut(unit: Unit, why: str, name: str, started: float, log: str | None = None) -> UnitOutcome:
    records = [_cut(unit, case, why, log, 0.0) for case in unit.cases]
    return UnitOutcome(records=records, row=_row(unit, name, started, judged=0, why=why))


def _row(unit: Unit, name: str, started: float | None, *, wall_s: float | None = None, judged: int = 0,
         again: int = 0, why: str | None = None) -> dict[str, Any]:
    wall = wall_s if wall_s is not None else (time.monotonic() - started if started is not None else 0.0)
    return {"process": name, "tool": unit.tool, "op": unit.op, "cases": len(unit.cases), "round": unit.round,
            "judged": judged, "again": again, "wall_s": round(wall, 3), "why": why}


def fold(findings: Sequence[CaseFinding]) -> tuple[CaseFinding, ...]:
    """One record per distinct finding of a case, its count the sum: a case that printed the same
    barrier error for 2048 threads keeps one record that says 2048."""
    out: dict[tuple, CaseFinding] = {}
    for f in findings:
        key = (f.tool, f.kind, f.file, f.line, f.function, f.instantiation, f.kernel, f.severity, f.peer)
        seen = out.get(key)
        out[key] = f if seen is None else CaseFinding(**{**seen.to_dict(), "count": seen.count + f.count})
    return tuple(out.values())
