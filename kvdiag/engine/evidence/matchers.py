"""Signature matchers: does this attempt's output show the defect?

One function per matcher type. Each returns a `Match` that says whether it
matched and quotes the exact lines that made it match; the judge confirms only
when every matcher of the entry matched in the same attempt.
"""

from __future__ import annotations

import re
import signal as signal_module
from dataclasses import dataclass, field
from typing import Callable

from kvdiag.engine.evidence.observe import Observations
from kvdiag.parse.set_apart import finding_matches
from kvdiag.engine.evidence.relative import judge_relative
from kvdiag.registry.entry import Matcher

MAX_QUOTED = 6
UNDETERMINED = "undetermined"   # a key of Match.extra: the matcher could not tell (a figure was missing)


@dataclass(frozen=True)
class Match:
    matcher: Matcher
    matched: bool
    quoted: tuple[str, ...] = ()
    detail: str = ""
    count: int = 0
    extra: dict = field(default_factory=dict)


def match(matcher: Matcher, obs: Observations) -> Match:
    return _MATCHERS[matcher.type](matcher, obs)


def _search(pattern: str | None, text: str | None) -> bool:
    return pattern is None or (text is not None and re.search(pattern, text) is not None)


def _sanitizer(m: Matcher, obs: Observations) -> Match:
    report = obs.sanitizer
    if report is None:
        return Match(m, False, detail="the step ran without a sanitizer")
    if m.tool and report.tool and m.tool != report.tool:
        return Match(m, False, detail=f"the report is from {report.tool}, not {m.tool}")
    # Without -lineinfo the tool prints no file:line; the site cannot be checked
    # then, and the match rests on kind and kernel (the judge warns about it).
    hits = [f for f in report.findings if finding_matches(m, f)]
    need = int(m.min_count)
    if len(hits) < need:
        return Match(m, False, detail=f"{len(hits)} matching finding(s) printed, {need} needed", count=len(hits))
    first = hits[0]
    quoted = tuple(first.raw_lines[:4])
    site = f"{first.file}:{first.line}" if first.file else f"{first.kernel_name}{first.offset or ''}"
    unchecked = m.site is not None and first.file is None
    detail = f"{len(hits)} printed finding(s) of kind {first.kind} at {site}"
    if unchecked:
        detail += " (no file:line in the output: the site pattern could not be checked; build with -lineinfo)"
    return Match(m, True, quoted=quoted, count=len(hits), detail=detail, extra={"site_unchecked": unchecked})


def _abort(m: Matcher, obs: Observations) -> Match:
    for info in obs.aborts:
        if m.kind and info.kind != m.kind:
            continue
        head = " ".join(x for x in (info.message, info.detail or "") if x)
        if not _search(m.message, head):
            continue
        trace_hit = None
        if m.backtrace:
            trace_hit = next((t for t in info.backtrace if re.search(m.backtrace, t)), None)
            if trace_hit is None:
                continue
        quoted = tuple(x for x in (info.message, info.detail, trace_hit) if x)
        return Match(m, True, quoted=quoted[:MAX_QUOTED], count=1, detail=f"{info.kind}: {info.message}")
    seen = "; ".join(a.message for a in obs.aborts[:3]) or "no abort in the output"
    return Match(m, False, detail=f"no abort matched ({seen})")


def _case(m: Matcher, obs: Observations) -> Match:
    report = obs.backend_ops
    if report is None:
        return Match(m, False, detail="the step has no test-backend-ops output")
    status = m.status
    hits = []
    for case in report.cases:
        if case.status != status or not _search(m.params, case.params):
            continue
        if m.metric:
            metrics = [x for x in case.metrics if x.name == m.metric
                       and (m.min_value is None or x.value >= float(m.min_value))]
            if not metrics:
                continue
        hits.append(case)
    need = int(m.min_count)
    if len(hits) < need:
        return Match(m, False, detail=f"{len(hits)} case(s) with status {status} matched, {need} needed",
                     count=len(hits))
    quoted = tuple(_case_line(c) for c in hits[:MAX_QUOTED])
    return Match(m, True, quoted=quoted, count=len(hits), detail=f"{len(hits)} case(s) {status}")


def _case_line(case) -> str:
    metrics = " ".join(f"{x.name} = {x.value:.9f} > {x.threshold:.9f}" for x in case.metrics if x.threshold is not None)
    return f"{case.op}({case.params}): {metrics + ' ' if metrics else ''}{case.status}"


def _output(m: Matcher, obs: Observations) -> Match:
    text = obs.stream(m.stream)
    pattern = re.compile(m.pattern, re.M)
    lines = [line for line in text.splitlines() if pattern.search(line)]
    if not lines and pattern.search(text):
        lines = [pattern.search(text).group(0)]
    if not lines:
        return Match(m, False, detail=f"/{m.pattern}/ not found in {m.stream}")
    return Match(m, True, quoted=tuple(lines[:MAX_QUOTED]), count=len(lines), detail=f"{len(lines)} line(s) matched")


def _exit(m: Matcher, obs: Observations) -> Match:
    last = obs.last
    if last is None:
        return Match(m, False, detail="nothing ran")
    if m.signal:
        wanted = int(getattr(signal_module, m.signal))
        ok = last.signal == wanted and not last.timed_out and not last.interrupted
    else:
        ok = last.returncode == int(m.code)
    return Match(m, ok, quoted=(last.describe(),) if ok else (), count=int(ok), detail=last.describe())


def _stale(m: Matcher, obs: Observations) -> Match:
    if obs.stale is None:
        return Match(m, False, detail=obs.stale_detail or "staleness could not be determined")
    lines = tuple(line for line in obs.stale_detail.splitlines() if line.strip())[:MAX_QUOTED]
    return Match(m, obs.stale, quoted=lines if obs.stale else (), count=int(obs.stale), detail=obs.stale_detail[:200])


def _relative(m: Matcher, obs: Observations) -> Match:
    found = judge_relative(m, obs)
    if found.held is None:
        return Match(m, False, detail=found.detail, extra={UNDETERMINED: True})
    extra = {"figures": {"step": found.values[0], "arm": found.values[1]}}
    return Match(m, found.held, quoted=found.quoted, count=int(found.held), detail=found.detail, extra=extra)


_MATCHERS: dict[str, Callable[[Matcher, Observations], Match]] = {
    "sanitizer": _sanitizer,
    "abort": _abort,
    "case": _case,
    "output": _output,
    "exit": _exit,
    "stale": _stale,
    "relative": _relative,
}
