"""Does a canary's sanitizer log prove its tool works here? The doctor's two questions.

The positive canary must be reported with the expected kind at the expected
``file:line`` (from its ``KVDIAG-EXPECT`` marker); the fixed twin must come out
clean, with a summary, and with the launcher's word that the kernel really ran.
Anything less is a reason, quoted in the control's record, never a pass.
"""

from __future__ import annotations

import os

from kvdiag.controls.canaries import Canary, MarkerError
from kvdiag.parse.sanitizer import parse_sanitizer, site_label

__all__ = ["judge_negative", "judge_positive", "plural"]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _count_text(report) -> str:
    """How many errors the tool counted, in its own words."""
    if report.error_count is not None:
        return plural(report.error_count, "error")
    if report.racecheck is not None:
        rc = report.racecheck
        return f"{plural(rc.hazards, 'hazard')} ({plural(rc.errors, 'error')}, {plural(rc.warnings, 'warning')})"
    return f"{plural(len(report.findings), 'finding')} printed, no summary"


def _sites_text(report, limit: int = 3) -> str:
    """``3 x invalid-write at k.cu:9, 1 x other at ?``: what the tool did report."""
    parts = [f"{s.count} x {s.kind} at {site_label(s)}" for s in report.sites[:limit]]
    if len(report.sites) > limit:
        parts.append(f"{len(report.sites) - limit} more site(s)")
    return ", ".join(parts)


def _at(finding, filename: str, line: int) -> bool:
    """The finding, or one of its other access sites (a race's peer), is at filename:line."""
    frames = [(finding.file, finding.line)]
    frames += [(p.file, p.line) for p in getattr(finding, "peers", ())]
    return any(f is not None and os.path.basename(f) == filename and ln == line for f, ln in frames)


def _not_run_text(report, run_note: str) -> str | None:
    """Why the log cannot be evidence of anything, or None when it can."""
    if report.tool_errors:
        return f"compute-sanitizer failed: {report.tool_errors[0]}" + (f" ({run_note})" if run_note else "")
    if not report.banner and not report.has_summary and not report.findings:
        return "compute-sanitizer wrote no report" + (f" ({run_note})" if run_note else "")
    return None


def judge_positive(c: Canary, log_text: str | None, *, run_note: str = "") -> tuple[bool, str]:
    """Did the tool report ``c``'s defect, of the expected kind, at the expected file:line?

    ``log_text`` is the tool's ``--log-file`` (or, when it wrote none, the run's
    combined output); ``run_note`` says how the run ended, for the detail.
    """
    try:
        line = c.expected_line()
    except (MarkerError, OSError) as exc:
        return False, f"the canary itself is broken: {exc}"
    kind, site = c.expected_kind, f"{c.filename}:{line}"
    if not log_text:
        return False, "no sanitizer output at all" + (f" ({run_note})" if run_note else "")
    report = parse_sanitizer(log_text, tool=c.tool)
    matching = [f for f in report.findings if f.kind == kind and _at(f, c.filename, line)]
    if matching:
        return True, f"{kind} at {site}, {_count_text(report)}"
    broken = _not_run_text(report, run_note)
    if broken:
        return False, f"expected {kind} at {site}; {broken}"
    if report.findings:
        return False, f"expected {kind} at {site}; the tool reported {_sites_text(report)} ({_count_text(report)})"
    if report.has_summary:
        return False, f"expected {kind} at {site}; the tool reported {_count_text(report)}"
    return False, (f"expected {kind} at {site}; the log has no summary: the tool did not finish"
                   + (f" ({run_note})" if run_note else ""))


def judge_negative(c: Canary, log_text: str | None, launcher: dict | None, *,
                   run_note: str = "") -> tuple[bool, str]:
    """Was the fixed twin clean: summary printed, 0 errors, no tool error, kernel really launched?"""
    if not log_text:
        return False, "no sanitizer output at all" + (f" ({run_note})" if run_note else "")
    report = parse_sanitizer(log_text, tool=c.tool)
    broken = _not_run_text(report, run_note)
    if broken:
        return False, broken
    if report.findings or report.error_count or (report.racecheck and (report.racecheck.hazards
                                                                          or report.racecheck.errors)):
        sites = _sites_text(report)
        return False, f"{_count_text(report)} on the fixed twin" + (f": {sites}" if sites else "")
    if not report.has_summary:
        return False, ("the log has no summary: the tool did not finish"
                       + (f" ({run_note})" if run_note else ""))
    if launcher is None:
        return False, (f"{_count_text(report)}, but the launcher never reported: nothing proves "
                       "the kernel ran" + (f" ({run_note})" if run_note else ""))
    if not launcher.get("ok"):
        return False, (f"{_count_text(report)}, but the kernel did not run to completion: "
                       f"{launcher.get('error') or 'launcher reported failure'}")
    return True, f"{_count_text(report)} ({c.filename}, launcher {launcher.get('launcher')})"
