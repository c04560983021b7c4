"""Which sanitizer findings belong to which test case, in one process that ran several.

`kvdiag scan` runs several test-backend-ops cases in one sanitized process (a host
starts only a few CUDA processes per second, whatever its GPUs: see
``kvdiag/engine/scan/batch.py``). compute-sanitizer then writes its report into the
program's own terminal (no ``--log-file``), so the two interleave in the order things
happened. On a terminal test-backend-ops' stdout is line-buffered, so a case's status
line reaches the stream as soon as the case has finished, and the sanitizer reports a
kernel's errors before the program gets past that kernel. Hence the rule used here:

    the findings printed after one case's status line, up to and including the
    line that carries the next case's status, belong to that next case.

It holds for both printing conventions of test-backend-ops (current ggml prints
``  OP(params): `` after the case ran, older builds before it, with the findings then
mid-line), but only on a terminal: through a pipe the status sits in stdio's buffer
while the next case's findings are already printed. ``split_cases`` therefore checks
what it can (the tool's own error total against the errors it attributed, nothing
printed after the last case) and says why a split cannot be trusted; the scan then
runs those cases one process each.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from kvdiag.parse.backend_ops import BackendCase, BackendOpsReport, parse_backend_ops
from kvdiag.parse.launches import Launch, parse_launches
from kvdiag.parse.sanitizer import SanitizerFinding, SanitizerReport, parse_sanitizer

# One per kernel launch whose records did not all fit the tool's device buffer; the
# tool counts each in its ERROR SUMMARY (measured: 12 overflowing launches, 3072
# printed records, "ERROR SUMMARY: 3084 errors").
_OVERFLOW = re.compile(r"={9} +Warning: Error buffer overflow has been detected")


@dataclass(frozen=True)
class CaseSegment:
    """One case of the process and the stretch of output that belongs to it."""

    case: BackendCase
    start_line: int                  # 1-based, first line after the previous case's status
    end_line: int                    # the line that carries this case's status
    findings: tuple[SanitizerFinding, ...] = ()
    overflow_warnings: int = 0
    launches: tuple[Launch, ...] = ()   # the launch probe's lines in the case's stretch (its kernels)

    @property
    def error_count(self) -> int:
        """Errors as the tool counts them: printed records plus overflowed launches."""
        return len(self.findings) + self.overflow_warnings


@dataclass(frozen=True)
class CaseSplit:
    segments: tuple[CaseSegment, ...]
    backend_ops: BackendOpsReport
    sanitizer: SanitizerReport | None
    trailing_findings: tuple[SanitizerFinding, ...] = ()   # printed after the last status
    trailing_overflow: int = 0
    lines: tuple[str, ...] = ()      # the process's output, line by line with their ends (split once)

    def segment(self, params: str) -> CaseSegment | None:
        return next((s for s in self.segments if s.case.params == params), None)

    def problems(self) -> tuple[str, ...]:
        """Why the attribution of findings to cases cannot be trusted (empty: it can)."""
        out: list[str] = []
        report = self.sanitizer
        if report is not None:
            if report.tool_errors:
                out.append(f"compute-sanitizer reported its own failure: {report.tool_errors[0]}")
            if not report.has_summary:
                out.append("compute-sanitizer did not finish its report (no summary line)")
            if report.not_printed:
                out.append(f"{report.not_printed} error(s) were counted but not printed (print limit)")
            if self.trailing_findings or self.trailing_overflow:
                out.append(f"{len(self.trailing_findings) + self.trailing_overflow} error(s) printed after "
                           "the last case's status: no case to attribute them to")
            attributed = sum(s.error_count for s in self.segments)
            if report.error_count is not None and report.error_count != attributed + self.trailing_overflow + len(
                    self.trailing_findings):
                out.append(f"the tool counted {report.error_count} error(s), the cases' output holds {attributed}")
        return tuple(out)


def split_cases(text: str, tool: str | None) -> CaseSplit:
    """Split one process's terminal output (ANSI-stripped) into per-case segments.

    ``tool`` is the sanitizer tool the process ran under, or None for a bare run (then
    only the cases' own lines are split)."""
    lines = text.splitlines(keepends=True)
    backend = parse_backend_ops(text)
    report = parse_sanitizer(text, tool=tool) if tool else None
    overflow_lines = [i for i, line in enumerate(lines, start=1) if _OVERFLOW.search(line)]
    findings = sorted((f for f in (report.findings if report else ()) if f.line_no is not None),
                      key=lambda f: f.line_no)
    launches = parse_launches(text)
    segments: list[CaseSegment] = []
    start = 1
    for case in backend.cases:
        end = case.status_line_no
        if end is None:   # never got a status: no segment (the caller runs it again alone)
            continue
        segments.append(CaseSegment(case, start, end, _within(findings, start, end),
                                    len(_within(overflow_lines, start, end, key=None)),
                                    _within(launches, start, end)))
        start = end + 1
    trailing = tuple(f for f in findings if f.line_no >= start)
    trailing_overflow = sum(1 for n in overflow_lines if n >= start)
    return CaseSplit(tuple(segments), backend, report, trailing, trailing_overflow, tuple(lines))


def _within(items, start: int, end: int, key=lambda x: x.line_no) -> tuple:
    """The items (sorted by line) whose line is in [start, end]: two bisections, not a scan of
    every item per case (a batch of 32 affected cases prints thousands of findings)."""
    lo = bisect.bisect_left(items, start, key=key)
    hi = bisect.bisect_right(items, end, key=key)
    return tuple(items[lo:hi])


def segment_text(text: str, segment: CaseSegment, lines: tuple[str, ...] = ()) -> str:
    """The lines of the output that belong to one case (``lines``: the text already split,
    as a CaseSplit holds it, so that judging every case of a batch splits it once)."""
    lines = lines or tuple(text.splitlines(keepends=True))
    return "".join(lines[segment.start_line - 1: segment.end_line])
