"""Sweep formats: one module per format, each a `SweepFormatter` that only reads a `Sweep`.

`SweepFormat` is the CLI's `--format` choice; `SweepFormat(name).to_formatter()`
is the one place a name becomes a formatter (a test loops over every member,
so no choice is left unwired). The views below (`EntryView`, `key_evidence`)
are shared by the human formats, so the terminal table, the Markdown and the
HTML page say the same thing about each entry.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Sequence

from kvdiag.records.sweep import SweepOutcome
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.store.sweeps import Sweep
from kvdiag.text import clip


class SweepFormatter(ABC):
    """Turns a sweep into text. Never runs anything, never changes the sweep."""

    #: a file name suffix for `-o` suggestions and artefacts
    suffix: str = ".txt"

    @abstractmethod
    def format(self, sweep: Sweep) -> str:
        raise NotImplementedError


class SweepFormat(str, Enum):
    TABLE = "table"
    JSON = "json"
    JUNIT = "junit"
    SARIF = "sarif"
    MARKDOWN = "markdown"
    HTML = "html"

    def to_formatter(self) -> SweepFormatter:
        if self is SweepFormat.TABLE:
            from kvdiag.report.formats.table import TableFormat
            return TableFormat()
        if self is SweepFormat.JSON:
            from kvdiag.report.formats.json_format import JsonFormat
            return JsonFormat()
        if self is SweepFormat.JUNIT:
            from kvdiag.report.formats.junit import JUnitFormat
            return JUnitFormat()
        if self is SweepFormat.SARIF:
            from kvdiag.report.formats.sarif import SarifFormat
            return SarifFormat()
        if self is SweepFormat.MARKDOWN:
            from kvdiag.report.formats.markdown import MarkdownFormat
            return MarkdownFormat()
        if self is SweepFormat.HTML:
            from kvdiag.report.formats.html import HtmlFormat
            return HtmlFormat()
        raise AssertionError(f"unwired format {self!r}")  # pragma: no cover - the member loop test guards this

    @classmethod
    def names(cls) -> list[str]:
        return [m.value for m in cls]


# --------------------------------------------------------------------------- shared views

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

#: verdicts in the order every summary lists them, worst first
VERDICT_ORDER = ("confirmed", "error", "inconclusive", "not-reproduced", "skipped", "not-applicable")


#: C0 controls but tab and newline, DEL and C1 controls: never shown raw in a human format
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_ansi(text: str) -> str:
    """Text from a log as a person should see it: ANSI escape sequences removed, any other
    control character (NUL, a lone ESC, DEL, ...) written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI.sub("", str(text)))


printable = strip_ansi


def primary_attempt(outcome: Outcome) -> Attempt | None:
    """The attempt that speaks for the outcome: the first confirmed one, else the first."""
    return next((a for a in outcome.attempts if a.verdict is Verdict.CONFIRMED),
                outcome.attempts[0] if outcome.attempts else None)


def _evidence(outcome: Outcome) -> Evidence:
    attempt = primary_attempt(outcome)
    return attempt.evidence if attempt else Evidence()


def error_count(outcome: Outcome) -> int | None:
    count = _evidence(outcome).error_count
    return int(count) if count is not None else None


def _names_site(line: str, site: dict) -> bool:
    """A quoted finding line is about this site: it names its file:line, or its kernel (as `kernel<` or `kernel(`)."""
    kernel = site.get("kernel") or ""
    return f" in {site.get('site')}" in line or bool(kernel) and (f"{kernel}<" in line or f"{kernel}(" in line)


def key_evidence(outcome: Outcome, width: int = 90) -> str:
    """One line: the sanitizer's count and first site when there is one, else what failed, else the reason."""
    ev = _evidence(outcome)
    sites = list(ev.sites)
    count = ev.error_count
    verdict = outcome.verdict
    if verdict in (Verdict.CONFIRMED, Verdict.INCONCLUSIVE) and (sites or count):
        quoted = [strip_ansi(line) for line in ev.quoted]
        # the sites the quoted (matching) findings name first: a tool warning elsewhere can outnumber them
        named = [s for s in sites if any(_names_site(line, s) for line in quoted)]
        sites = named + [s for s in sites if s not in named]
        if count is not None:
            text = f"{count} error(s)"
        else:   # racecheck counts hazards in its own summary: say what was printed, of the matching sites
            text = f"{sum(int(s.get('count') or 0) for s in (named or sites)) or '?'} printed finding(s)"
        if sites:
            text += f" at {sites[0].get('site') or '?'}"
            if len(sites) > 1:
                text += f" (+{len(sites) - 1} site{'s' if len(sites) > 2 else ''})"
        return clip(text, width)
    if verdict is Verdict.CONFIRMED:
        if ev.aborts:
            return clip(f"{ev.aborts[0].get('kind', 'abort')}: {ev.aborts[0].get('message', '')}", width)
        failing = [c for c in ev.case_metrics if c.get("status") == "FAIL"]
        if failing:
            metrics = failing[0].get("metrics") or []
            first = f" {metrics[0]['name']} = {metrics[0]['value']} > {metrics[0]['threshold']}" if metrics else ""
            return clip(f"{len(failing)} failing case(s):{first}", width)
        if ev.quoted:
            return clip(strip_ansi(ev.quoted[0]), width)
    return clip(strip_ansi(str(outcome.reason)), width)


@dataclass(frozen=True)
class SiteView:
    site: str
    kind: str
    kernel: str
    file: str | None
    line: int | None
    count: int | None
    blocks: int | None


@dataclass(frozen=True)
class EntryView:
    """Everything a human format shows about one entry, every field present."""

    id: str
    title: str
    verdict: str
    k_of_n: str
    reason: str
    key_evidence: str
    duration_s: float
    error_count: int | None
    quoted: tuple[str, ...]
    sites: tuple[SiteView, ...]
    instantiations: tuple[str, ...]
    exit: str | None
    running_case: str | None
    warnings: tuple[str, ...]
    command: str | None
    run_dir: str | None
    step: str | None
    attempts: tuple[tuple[int, str, str], ...]   # (index, verdict, reason) of each attempt, when several
    device: str | None = None                     # "1 NVIDIA H200": the GPU whose worker produced it
    range: str | None = None                      # what the affected ranges say: "fixed by range (85f99dca8 is …)"
    range_status: str | None = None               # its status word: affected | fixed | unaffected | unknown | none
    range_placed: str | None = None               # how the tree was placed: git | history | index | stamp | unplaced
    launched: tuple[str, ...] = ()                # kernels the launch probe saw start (canonical)
    launch_proof: str | None = None               # the launch-proof gate's words (engine.evidence.launch_proof)

    @property
    def has_detail(self) -> bool:
        return bool(self.quoted or self.sites or self.instantiations or self.warnings or self.command
                    or self.exit or self.running_case or len(self.attempts) > 1)


def first_command(outcome: Outcome) -> str | None:
    import shlex

    for attempt in outcome.attempts:
        for command in attempt.commands:
            argv = command.get("argv")
            if argv:
                return shlex.join(str(a) for a in argv)
    return None


def _optional(value: Any) -> str | None:
    return None if value is None else printable(value)


def entry_view(outcome: SweepOutcome) -> EntryView:
    ev = _evidence(outcome)
    sites = tuple(SiteView(site=printable(s.get("site") or "?"), kind=printable(s.get("kind") or ""),
                           kernel=printable(s.get("kernel") or ""), file=s.get("file"), line=s.get("line"),
                           count=s.get("count"), blocks=s.get("blocks"))
                  for s in ev.sites)
    return EntryView(
        id=printable(outcome.entry_id), title=printable(outcome.title),
        verdict=printable(outcome.verdict.value),
        k_of_n=outcome.k_of_n, reason=strip_ansi(str(outcome.reason or "")),
        key_evidence=key_evidence(outcome), duration_s=float(outcome.duration_s),
        error_count=error_count(outcome), quoted=tuple(strip_ansi(str(q)) for q in ev.quoted),
        sites=sites, instantiations=tuple(printable(i) for i in ev.instantiations),
        exit=_optional(ev.exit), running_case=_optional(ev.running_case),
        warnings=tuple(printable(w) for w in outcome.warnings),
        command=_optional(first_command(outcome)), run_dir=_optional(outcome.run_dir),
        step=_optional(outcome.step),
        attempts=tuple((a.index, a.verdict.value, strip_ansi(str(a.reason))) for a in outcome.attempts),
        device=device_label(outcome.device),
        range=printable(outcome.range.summary) if outcome.range is not None else None,
        range_status=outcome.range.status if outcome.range is not None else None,
        range_placed=outcome.range.placement if outcome.range is not None else None,
        launched=tuple(printable(k) for k in getattr(ev, "launched", ())),
        launch_proof=_optional(getattr(ev, "launch_proof", None)),
    )


def device_label(device: Mapping[str, Any] | None) -> str | None:
    if not device:
        return None
    return f"{device.get('index')} {device.get('name') or ''}".strip()


def printable_summary(t):
    """A `TargetSummary` whose every text field is `printable` (build and host strings come from
    the machine and the build's cache, and reach every human format)."""
    from dataclasses import fields, replace

    return replace(t, **{f.name: printable(getattr(t, f.name)) for f in fields(t)
                         if isinstance(getattr(t, f.name), str)})


def entry_views(sweep: Sweep) -> list[EntryView]:
    return [entry_view(o) for o in sweep.outcomes]


def ordered_counts(sweep: Sweep) -> list[tuple[str, int]]:
    """(verdict, count) for every verdict, worst first."""
    counts = sweep.counts()
    return [(v, counts.get(v, 0)) for v in VERDICT_ORDER]


def format_seconds(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def shard_note(sweep: Sweep) -> str:
    parts = []
    if sweep.shard:
        origin = sweep.shard_from or {}
        named = ", ".join(f"{k}={v}" for k, v in (origin.get("variables") or {}).items())
        parts.append(f"shard {sweep.shard} of {len(sweep.selection)} selected entries"
                     + (f" (from {origin.get('engine')}: {named})" if origin else ""))
    if sweep.interrupted:
        parts.append(f"INTERRUPTED: {len(sweep.outcomes)} of {len(sweep.planned)} entries finished")
    return "; ".join(parts)


__all__: Sequence[str] = (
    "SweepFormat", "SweepFormatter", "EntryView", "SiteView", "entry_view", "entry_views", "key_evidence",
    "ordered_counts", "primary_attempt", "strip_ansi", "printable", "printable_summary", "clip", "first_command", "format_seconds", "shard_note",
    "VERDICT_ORDER",
)
