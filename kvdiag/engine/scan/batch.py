"""Several scan cases in one sanitized process, each still judged on its own output.

Why: a host starts only a few CUDA processes per second, whatever its GPUs (the
driver serialises them; docs/performance.md has the measurements). One process per
case caps a scan at that rate; a batch pays the start once for all its cases.

How: the cases go to `test-backend-ops -p '^(case1|case2|…)$'` on a terminal, with
the sanitizer's report in the same stream (no `--log-file`), `--print-limit 0` (a
limit counts per process: it would hide later cases' findings) and
`--destroy-on-device-error kernel` (the default, context, ends the process at the first
affected case). `kvdiag.parse.case_segments` gives each case its findings; each case
is then judged exactly as a one-case run is (same matchers, same controls gate).
Whatever cannot be trusted runs again, and no more of it than must: in a process that
died or hung, each case that printed its status is complete and judged there; the case
that was running runs again alone and the cases after it in two new batches. A report the
split cannot account for sends its batch again in two halves; a case with no status or a
FAIL (whose exit status would be its own when alone) runs again alone. So one bad case
costs a few more processes (halves), not one per case of its batch, whatever its size; at
worst, every case bad, a batch of n takes about 2n processes where one per case took n + 1. A
process that could not start at all says nothing about its cases: a command line too long
for the kernel is cut in two batches, any other exec error is every case's reason (alone,
each would fail the same).

The one `-p` regex of a batch is capped in bytes (MAX_PATTERN_BYTES, cases_per_pattern):
every caller that puts several cases in one process sizes its batches with it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence, TypeVar

from kvdiag.engine.verdict.devices import describe
from kvdiag.controls.gate import GateProvider
from kvdiag.engine.evidence.launch_proof import launch_context
from kvdiag.engine.verdict.devices import gpu_lease
from kvdiag.engine.verdict.planning import RunOptions, plan_step
from kvdiag.engine.verdict.launch_program import launch_listed
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.observe import observe_segment
from kvdiag.engine.verdict.planning import TemplateProblem, escape_params
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.engine.verdict.processes import sanitizer_invocation
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.proc.sanitizer import DESTROY_OPTION
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

T = TypeVar("T")

MAX_BATCH = 128
"""The most cases one sanitized scan process runs, by hand (`--batch`) or by auto_batch_size."""
WAVES = 2
"""Batches per worker when the size is automatic. Each sanitized process pays a start of its own (about
4.4 s under synccheck on an H100), so fewer, larger batches save that many starts; two each leave a worker
whose first batch ran long one more to even out. Measured on one H100 (device session 31, D2's 2034
routed cases, 9 workers, two bench runs in opposite orders): the detect phase took 42.2 and 40.6 s in
batches of 113 (two waves), 50.3 and 48.7 s in the old batches of at most 32 (64 processes), 43.9 s in
batches of 128 (16 processes: a wave of 9, one of 7)."""
MAX_PATTERN_BYTES = 96 * 1024
"""The most bytes one process's `-p` regex may take. Linux refuses to start a program one of whose
arguments is over MAX_ARG_STRLEN (32 pages: 131072 bytes with its NUL) with E2BIG, "Argument list too
long", whatever ARG_MAX (argv and environment together, a quarter of the stack limit: 2 MiB at 8 MiB)
allows. On the H200 the BeeLlama fork's FLASH_ATTN_EXT cases (about 400 bytes each, escaped) put about
478 cases in each route process: a regex of 194,266 bytes, and no route process started
(docs/performance.md). 96 KiB keeps a margin under the kernel's limit for any case length."""
ARGV_ROOM = 16 * 1024      # under ARG_MAX, for the rest of a command line: program, options, the sanitizer's own
# Statuses a case may be judged on from a batch; anything else runs again alone.
_JUDGED_HERE = ("OK", "NOT_SUPPORTED")


@dataclass
class BatchOutcome:
    resolved: dict[str, Attempt] = field(default_factory=dict)   # params -> the case's attempt
    again: list[str] = field(default_factory=list)                # cases to run one per process
    split: list[list[tuple[int, str]]] = field(default_factory=list)   # its command line too long: two batches
    why_again: str | None = None
    wall_s: float = 0.0
    log: str | None = None


def batch_regex(cases: Sequence[str]) -> str:
    """A -p regex that matches exactly these cases' parameter strings."""
    return "^(" + "|".join(escape_params(p) for p in cases) + ")$"


def pattern_cap() -> int:
    """MAX_PATTERN_BYTES, or less where this host's ARG_MAX leaves less room beside kvdiag's
    environment (which the child inherits) and the rest of the command line (ARGV_ROOM)."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        return MAX_PATTERN_BYTES
    pointer = 8
    environment = sum(len(k) + len(v) + 2 + pointer for k, v in os.environb.items())
    return max(4096, min(MAX_PATTERN_BYTES, arg_max - environment - ARGV_ROOM))


def deal(numbered: Sequence[T], size: int) -> list[list[T]]:
    """The cases dealt round-robin into batches of at most `size`.

    test-backend-ops lists a case space in nested loops, so its heaviest shapes come
    together (for D2's hsk=256 space, kv=16384 with nb=512 at the end); in consecutive
    batches one batch gets them all and sets the wall (measured on two H200s: 9.3 s for
    that batch of 6 cases, 5.2 to 5.8 s for the average batch). Dealt, every batch gets
    its share, and each keeps the listing's order."""
    if size <= 1:
        return [[case] for case in numbered]
    n = -(-len(numbered) // size)
    return [list(numbered[i::n]) for i in range(n)]


def cases_per_pattern(cases: Sequence[str]) -> int:
    """The most of ``cases`` one batch_regex may hold within pattern_cap(), judged by the longest
    (escaped, in bytes): any batch of that many of them stays under the cap."""
    longest = max((len(escape_params(c).encode()) for c in cases), default=1)
    return max(1, (pattern_cap() - len("^()$")) // (longest + 1))


def auto_batch_size(n_cases: int, workers: int) -> int:
    """WAVES batches per worker, so that each worker starts that many processes and no more (each
    start under the sanitizer costs seconds), at most MAX_BATCH cases per process."""
    if n_cases <= 0 or workers <= 0:
        return 1
    return max(1, min(MAX_BATCH, math.ceil(n_cases / (WAVES * workers))))


def batchable(step: Step) -> bool:
    """A step can be batched when its cases come from one test-backend-ops -p regex and
    nothing is judged on the process as a whole (an `expect` pattern may be printed
    once per process, not once per case)."""
    return step.kind == "backend-ops" and not step.expect and len(step.command_templates) == 1 and any(
        "params" in part for part in step.command_templates[0])


def batch_step(step: Step) -> Step:
    """The step as a batch runs it: on a terminal, every finding printed, and a finding
    that does not end the process."""
    options = tuple(step.sanitizer_options)
    if step.sanitizer and DESTROY_OPTION not in options:
        options += (DESTROY_OPTION, "kernel")
    return dataclasses.replace(step, tty=True, sanitizer_options=options,
                               print_limit=0 if step.sanitizer else step.print_limit)


def batch_timeout(step: Step, n_cases: int) -> float:
    """The whole batch's cap: every case its own timeout. The runner also stops a batch that
    printed nothing for one case's timeout (`quiet_timeout`): a case that hangs costs what
    it would cost alone, then the batch's cases run again one per process."""
    return step.timeout * max(1, n_cases)


def run_batch(entry: Entry, step: Step, target: Target, run_dir: RunDir, *, number: int,
              cases: Sequence[tuple[int, str]], options: RunOptions, gate_provider: GateProvider) -> BatchOutcome:
    """Run `cases` ((index, params) pairs) in one process and judge each from its share."""
    bstep = batch_step(step)
    name = f"batch{number:03d}"
    params = [p for _, p in cases]
    out = BatchOutcome()
    try:
        planned = plan_step(entry, bstep, target, run_dir, dataclasses.replace(
            options, overrides={**options.overrides, "params": batch_regex(params)}))
    except TemplateProblem as exc:
        return _again(out, params, f"the batch could not be planned: {exc}")
    argv = tuple(planned.commands[0])
    invocation = sanitizer_invocation(bstep)
    if invocation is not None:
        argv = invocation.argv(target.sanitizer, None, argv)
    started = time.monotonic()
    try:
        with gpu_lease(entry, target, options):
            started = time.monotonic()      # the batch's wall is its process's, not its wait for a turn
            result = run_command(argv, timeout=batch_timeout(step, len(params)), log_dir=run_dir.logs, name=name,
                                 env_overrides=planned.env or None, tty=True, cancel=options.cancel,
                                 quiet_timeout=step.timeout)
    except CommandInterrupted:
        out.wall_s = time.monotonic() - started
        return out   # Ctrl-C: its cases stay unrun (listed as such); the log is on disk
    except CommandNotFound as exc:
        return not_started(out, step, cases, exc, options)
    out.wall_s = time.monotonic() - started
    out.log = str(run_dir.logs / f"{name}.stdout.log")
    text = strip_ansi(result.stdout_text())
    split = split_cases(text, bstep.sanitizer)
    problems = list(split.problems())
    ended = None
    if result.timed_out:
        ended = result.describe()
    elif not split.backend_ops.finished:
        ended = f"the process did not finish ({result.describe()})"
    tool_failed = split.sanitizer is not None and bool(split.sanitizer.tool_errors)
    unfinished = sorted((index, case) for index, case in cases if split.segment(case) is None)
    # Attributed case by case only where the tool itself held, and a process that ended early shows
    # which case it ended in (one that died after every case's status died outside them: alone, each
    # case would show it in its own exit).
    if (ended is None and problems) or tool_failed or (ended is not None and not unfinished):
        return _halves(out, cases, "; ".join(([ended] if ended else []) + problems))
    share = out.wall_s / max(1, len(params))
    device = None
    if options.device is not None:
        device = describe(options.device)
    if ended is not None:
        # Died or hung: a case that printed its status is complete; the one running then runs again alone,
        # the ones it kept from running in two new batches.
        out.again.append(unfinished[0][1])
        _run_again(out, unfinished[1:])
        out.why_again = ended
    for index, case in cases:
        segment = split.segment(case)
        if segment is None and ended is not None:
            continue                                    # sent again above
        if segment is None or segment.case.status not in _JUDGED_HERE:
            out.again.append(case)
            continue
        obs = observe_segment(bstep, text, split, segment, launch_listed(planned))
        attempt = judge_attempt(entry, obs, lambda: gate_provider(step.sanitizer), index, share, str(run_dir.logs),
                                presence=target.range_evidence(entry), launch=launch_context(target, per_case=True))
        out.resolved[case] = dataclasses.replace(attempt, commands=(_command_record(result, segment),),
                                                 device=device)
    if out.again and out.why_again is None:
        out.why_again = "no status of their own in the batch, or FAIL"
    return out


def _command_record(result: Any, segment) -> dict[str, Any]:
    """The batch's command, and where in its output this case's share lies."""
    record = dict(result.to_dict())
    record["batch_lines"] = [segment.start_line, segment.end_line]
    return record


def _again(out: BatchOutcome, params: Sequence[str], why: str) -> BatchOutcome:
    out.again = list(params)
    out.why_again = why
    return out


def _run_again(out: BatchOutcome, cases: Sequence[tuple[int, str]]) -> None:
    """``cases`` to run again in two batches; a half of one case runs alone (as ``again``)."""
    half = (len(cases) + 1) // 2
    for part in (cases[:half], cases[half:]):
        if len(part) == 1:
            out.again.append(part[0][1])
        elif part:
            out.split.append(list(part))


def _halves(out: BatchOutcome, cases: Sequence[tuple[int, str]], why: str) -> BatchOutcome:
    """A batch whose report cannot be attributed case by case: its cases again, in two batches."""
    _run_again(out, cases)
    out.why_again = why
    return out


def not_started(out: BatchOutcome, step: Step, cases: Sequence[tuple[int, str]], exc: CommandNotFound,
                options: RunOptions) -> BatchOutcome:
    """A batch whose process could not start: a harness problem, not its cases'. A command line too
    long is cut in two batches; any other exec error would fail each case alone the same way, so it
    is every case's reason (skipped, as a case alone gets it: engine.verdict.attempt), without a process each."""
    if exc.arguments_too_long and len(cases) > 1:
        half = len(cases) // 2
        out.split = [list(cases[:half]), list(cases[half:])]
        out.why_again = f"split in two batches: {exc}"
        return out
    device = describe(options.device) if options.device is not None else None
    reason = f"not run: its batch's process could not start: {exc}"
    out.resolved = {case: Attempt(step=step.name, index=index, verdict=Verdict.SKIPPED, reason=reason,
                                  evidence=Evidence(), device=device) for index, case in cases}
    out.why_again = f"not started: {exc}"
    return out
