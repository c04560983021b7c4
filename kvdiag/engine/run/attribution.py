"""Which test case killed the walk: re-run the candidates one per process until one reproduces.

test-backend-ops prints a case only after it ran, so a process that dies mid-walk
(GGML_ABORT, SIGSEGV, the sanitizer's --error-exitcode, destroy-on-device-error)
can only be placed "after the last case that finished", or nowhere when it died
in the first ("none printed"). A triage report needs the case itself, with its
own output. The candidates are the supported cases of the step's selection in
the order test-backend-ops walks them (`test-backend-ops support`, the listing
`kvdiag scan` uses; it runs no kernel), starting with the one after the last that
finished. Each runs alone through the same per-case attempt as a scan
(`exact_case_regex` + `attempt_step`) until one dies the same way; the search is
bounded by a number of processes and a time budget, and what it cost is recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.attempt import attempt_step
from kvdiag.engine.verdict.planning import RunOptions, plan_step
from kvdiag.engine.scan.cases import enumerate_cases, exact_case_regex
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.errors import KvdiagError
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

MAX_CASES = 12          # processes at most, on top of the run
BUDGET_S = 180.0        # seconds at most, on top of the run
IMPRECISE = "the case after "
OUTPUT_LINES = 15       # of the case's own output, quoted in the verdict
MATCHED_LINES = 8       # of those, the most given to the lines that matched the signature


@dataclass
class Attribution:
    """The case that reproduced alone (or why none was found), and what finding it cost."""

    op: str
    case: str | None = None                 # the case's parameter string
    attempt: Attempt | None = None          # its own run, judged like any attempt
    tried: list[dict[str, Any]] = field(default_factory=list)
    candidates: int = 0
    wall_s: float = 0.0
    why_not: str | None = None
    log: str | None = None                  # the case's own combined log
    sanitizer_log: str | None = None        # and its sanitizer log, when the step ran under one
    output: tuple[str, ...] = ()            # its matched lines, then its abort, quoted in the verdict

    @property
    def case_string(self) -> str | None:
        return f"{self.op}({self.case})" if self.case is not None else None

    def to_dict(self) -> dict[str, Any]:
        ev = self.attempt.evidence if self.attempt is not None else None
        return {
            "case": self.case_string, "params": self.case, "candidates": self.candidates,
            "processes": len(self.tried), "wall_s": round(self.wall_s, 3), "tried": self.tried,
            "why_not": self.why_not,
            "verdict": self.attempt.verdict.value if self.attempt is not None else None,
            "quoted": list(ev.quoted) if ev else [],
            "aborts": [dict(a) for a in ev.aborts] if ev else [],
            "error_count": ev.error_count if ev else None,
            "exit": ev.exit if ev else None,
            "log": self.log, "sanitizer_log": self.sanitizer_log, "output": list(self.output),
        }


def needs_attribution(step: Step, attempt: Attempt) -> bool:
    """The walk died (or was ended) without naming the case it was in."""
    ev = attempt.evidence
    if step.kind != "backend-ops" or attempt.verdict not in (Verdict.CONFIRMED, Verdict.INCONCLUSIVE):
        return False
    if ev.cases_matched is None or not ev.exit or ev.exit == "exit 0":
        return False
    if ev.running_case is not None:
        return ev.running_case.startswith(IMPRECISE)   # died after some case, in one never printed
    return ev.cases_matched == 0                          # died before printing any case


def _argv_value(argv: Sequence[str], flag: str) -> str | None:
    for a, b in zip(argv, argv[1:]):
        if a == flag:
            return b
    return None


def reproduces(original: Attempt, alone: Attempt) -> bool:
    """The lone case ended as the walk did: confirmed for a confirmed walk, else the same death."""
    if original.verdict is Verdict.CONFIRMED:
        return alone.verdict is Verdict.CONFIRMED
    return alone.evidence.exit == original.evidence.exit and alone.verdict is not Verdict.NOT_REPRODUCED


def attribute_outcome(entry: Entry, step: Step, target: Target, run_dir: RunDir, attempts: Sequence[Attempt],
                      verdict: Verdict, options: RunOptions, gate_provider: GateProvider) -> dict[str, Any]:
    """`RunOptions.attribute`: after a confirmed or inconclusive verdict whose walk died unplaced,
    ``{"case": …}`` for run.json's `extra` (empty when there is nothing to place)."""
    if verdict not in (Verdict.CONFIRMED, Verdict.INCONCLUSIVE):
        return {}
    subject = next((a for a in attempts if a.verdict is verdict and needs_attribution(step, a)), None)
    if subject is None:
        return {}
    return {"case": attribute_case(entry, step, target, run_dir, subject, options=options,
                                   gate_provider=gate_provider).to_dict()}


def candidate_cases(listed: Sequence[str], supported: Sequence[str], last_finished: str | None) -> list[str]:
    """The supported cases after the last one that finished, in walk order (all of them when none
    finished, or when the last one is not in the listing)."""
    order = list(listed)
    start = order.index(last_finished) + 1 if last_finished in order else 0
    keep = set(supported)
    return [c for c in order[start:] if c in keep]


def attribute_case(entry: Entry, step: Step, target: Target, run_dir: RunDir, original: Attempt, *,
                   options: RunOptions, gate_provider: GateProvider, max_cases: int | None = None,
                   budget_s: float | None = None) -> Attribution:
    started = time.monotonic()
    max_cases = MAX_CASES if max_cases is None else max_cases
    budget_s = BUDGET_S if budget_s is None else budget_s
    argv = plan_step(entry, step, target, run_dir, options).commands[0]
    op = _argv_value(argv, "-o") or str(step.vars.get("op", ""))
    params = _argv_value(argv, "-p") or ""
    backend = _argv_value(argv, "-b") or "CUDA0"
    result = Attribution(op=op)
    try:
        space = enumerate_cases(target, op, params, run_dir, backend=backend)
    except (KvdiagError, OSError) as exc:
        result.why_not = f"the case space could not be listed ({exc})"
        result.wall_s = time.monotonic() - started
        return result
    candidates = candidate_cases(space.listed or space.supported, space.supported,
                                 original.evidence.last_finished_case)
    result.candidates = len(candidates)
    for n, case in enumerate(candidates, start=1):
        spent = time.monotonic() - started
        if n > max_cases or spent >= budget_s:
            result.why_not = (f"none of the first {len(result.tried)} of {len(candidates)} candidate case(s) "
                              f"reproduced alone within the bound ({max_cases} processes, {budget_s:.0f} s)")
            break
        lone = RunOptions(overrides={**options.overrides, "params": exact_case_regex(case)},
                          cancel=options.cancel, device=options.device, progress=options.progress)
        bounded = step if step.timeout <= budget_s - spent else _shorter(step, budget_s - spent)
        attempt = attempt_step(entry, bounded, target, run_dir, n, f"{entry.id} case {n} alone", lone,
                               gate_provider, name_prefix=f"attribute-case{n:03d}")
        result.tried.append({"case": f"{op}({case})", "verdict": attempt.verdict.value,
                             "exit": attempt.evidence.exit, "seconds": round(attempt.duration_s, 3)})
        if reproduces(original, attempt):
            result.case, result.attempt = case, attempt
            log = run_dir.logs / f"attribute-case{n:03d}.combined.log"
            result.log, result.output = str(log), own_output(attempt, log)
            sanitizer_log = run_dir.logs / f"attribute-case{n:03d}.sanitizer.log"
            result.sanitizer_log = str(sanitizer_log) if sanitizer_log.exists() else None
            break
    else:
        if not candidates:
            result.why_not = "no supported case after the last one that finished"
        elif result.case is None:
            result.why_not = f"none of the {len(candidates)} candidate case(s) reproduced alone"
    result.wall_s = time.monotonic() - started
    return result


def own_output(attempt: Attempt, log, n: int = OUTPUT_LINES) -> tuple[str, ...]:
    """What the case's own run shows, at most ``n`` lines: first the lines that matched the
    signature in it (the sanitizer's findings, which its own sanitizer log holds, or the abort
    line), then how the process died (the abort's lines: the CUDA error, its device and call,
    ggml's ``file:line: message``), then the backtrace's named frames. The log's last lines
    when it shows neither."""
    text = _log_tail(log)
    matched = _distinct(attempt.evidence.quoted)[:MATCHED_LINES]
    died = _abort_block(text)
    if not matched and not died:
        return tail_lines(log, n)
    out = list(matched)
    out += [line for line in died if line not in out and line.strip() not in out]
    return tuple(out[:n])


def _distinct(quoted: Sequence[str]) -> list[str]:
    """Each quoted line once; a bare match ("fatal error") dropped beside the line that holds it."""
    lines = list(dict.fromkeys(q.rstrip() for q in quoted if q.strip()))
    return [q for q in lines if not any(q != other and q in other for other in lines)]


def _abort_block(text: str) -> list[str]:
    """The lines of a log that say how its process died, then the backtrace's named frames."""
    from kvdiag.parse.aborts import backtrace_symbol, is_backtrace, parse_aborts

    events = [e for e in parse_aborts(text) if e.line_no is not None]
    if not events:
        return []
    lines = text.splitlines()
    first, last = min(e.line_no for e in events), max(e.line_no for e in events)
    said: list[str] = []
    for no in range(first, len(lines) + 1):
        line = lines[no - 1].rstrip()
        frame = not line.strip() or is_backtrace(line)
        if frame and no > last:
            break
        if not frame:
            said.append(line)
    frames = [f for e in events for f in e.backtrace if backtrace_symbol(f)]
    return said + list(dict.fromkeys(frames))


def _log_tail(path, limit: int = 64 * 1024) -> str:
    """At most ``limit`` bytes from a log's end, without colour codes ("" when unreadable)."""
    from kvdiag.parse.text import strip_ansi

    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return strip_ansi(f.read().decode("utf-8", errors="replace"))
    except OSError:
        return ""


def tail_lines(path, n: int = OUTPUT_LINES, limit: int = 64 * 1024) -> tuple[str, ...]:
    """The last ``n`` non-empty lines of a log (at most ``limit`` bytes read from its end)."""
    lines = [line.rstrip() for line in _log_tail(path, limit).splitlines() if line.strip()]
    return tuple(lines[-n:])


def _shorter(step: Step, seconds: float) -> Step:
    from dataclasses import replace

    return replace(step, timeout=max(1, int(seconds)))
