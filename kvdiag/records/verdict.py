"""Verdicts and the evidence behind them: the values every formatter reads.

The six verdicts are distinct on purpose (see docs/verdicts.md): `confirmed`
needs the signature to have matched in this run's output; `not-reproduced`
needs matching work to have executed *and* the detector's control to have
passed on this machine; zero matched cases is `not-applicable` only where the
entry's affected range (``Outcome.range``) or the source says the defect cannot be
there, and `inconclusive` otherwise; anything else that went wrong is
`inconclusive`, showing what happened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Iterable, Mapping

from kvdiag.exitcodes import ExitCode
from kvdiag.records.ranges import RangeEvidence
from kvdiag.records.rates import Rate

__all__ = ["Attempt", "Evidence", "Outcome", "Verdict", "aggregate", "combined_exit_code"]

_OMITTED_WHEN_EMPTY = ("launched", "launch_listing", "launch_proof", "lines_cut")


class Verdict(str, Enum):
    CONFIRMED = "confirmed"
    NOT_REPRODUCED = "not-reproduced"
    NOT_APPLICABLE = "not-applicable"
    SKIPPED = "skipped"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"

    @property
    def exit_code(self) -> ExitCode:
        return {
            Verdict.CONFIRMED: ExitCode.CONFIRMED,
            Verdict.NOT_REPRODUCED: ExitCode.OK,
            Verdict.NOT_APPLICABLE: ExitCode.NOT_APPLICABLE,
            Verdict.SKIPPED: ExitCode.SKIPPED,
            Verdict.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
            Verdict.ERROR: ExitCode.HARNESS,
        }[self]


def combined_exit_code(verdicts, interrupted: bool = False) -> int:
    """One exit code for several entries' verdicts (`run` with several ids, `sweep`, `merge`).

    130 if interrupted; else the worst of confirmed (1), error (70), inconclusive (4). Otherwise 0
    only when some entry was judged not-reproduced (or none was selected, as in an empty shard);
    a selection in which nothing was judged gives skipped (3) if any entry was skipped, else
    not-applicable (2), so that a CI job never reads "nothing could run here" as a clean result.
    One verdict keeps its own code."""
    verdicts = [Verdict(v) for v in verdicts]
    if interrupted:
        return int(ExitCode.INTERRUPTED)
    if len(verdicts) == 1:
        return int(verdicts[0].exit_code)
    for worst in (Verdict.CONFIRMED, Verdict.ERROR, Verdict.INCONCLUSIVE):
        if worst in verdicts:
            return int(worst.exit_code)
    if not verdicts or Verdict.NOT_REPRODUCED in verdicts:     # an empty shard misses nothing
        return int(ExitCode.OK)
    return int(ExitCode.SKIPPED if Verdict.SKIPPED in verdicts else ExitCode.NOT_APPLICABLE)


@dataclass(frozen=True)
class Evidence:
    """What a run showed, extracted from its logs. Every field is optional."""

    quoted: tuple[str, ...] = ()            # exact lines from the logs that support the verdict
    error_count: int | None = None          # the sanitizer's ERROR SUMMARY count
    sites: tuple[Mapping[str, Any], ...] = ()
    instantiations: tuple[str, ...] = ()
    case_metrics: tuple[Mapping[str, Any], ...] = ()
    aborts: tuple[Mapping[str, Any], ...] = ()
    running_case: str | None = None         # the test case that was running when the process died
    last_finished_case: str | None = None   # parameters of the last case whose line was printed
    cases_matched: int | None = None
    cases_executed: int | None = None
    cases_failed: int | None = None
    cases_not_supported: int | None = None
    exit: str | None = None
    matched: tuple[str, ...] = ()           # which signature matchers matched
    unmatched: tuple[str, ...] = ()
    launched: tuple[str, ...] = ()          # kernel instantiations the launch probe saw start (canonical)
    launch_listing: str | None = None       # how launches were listed ("launch probe"); None: not listed
    launch_proof: str | None = None         # what the launch-proof gate concluded (engine.evidence.launch_proof)
    lines_cut: int = 0                      # lines over kvdiag.parse.text.LINE_LIMIT cut before judging

    def to_dict(self) -> dict[str, Any]:
        data = _plain(asdict(self))
        for key in _OMITTED_WHEN_EMPTY:   # absent from runs recorded before them, and so from theirs when empty
            if not data.get(key):
                data.pop(key, None)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Evidence":
        known = {f.name: f for f in fields(cls)}
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known}
        return cls(**values)


@dataclass(frozen=True)
class Attempt:
    """One execution of one repro step (a flaky entry has several)."""

    step: str
    index: int
    verdict: Verdict
    reason: str
    evidence: Evidence
    commands: tuple[Mapping[str, Any], ...] = ()
    duration_s: float = 0.0
    log_dir: str | None = None
    device: Mapping[str, Any] | None = None   # the GPU it ran on, when pinned to one

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "index": self.index, "verdict": self.verdict.value, "reason": self.reason,
            "evidence": self.evidence.to_dict(), "commands": _plain(list(self.commands)),
            "duration_s": round(self.duration_s, 3), "log_dir": self.log_dir,
            "device": _plain(dict(self.device)) if self.device else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Attempt":
        return cls(step=data["step"], index=int(data["index"]), verdict=Verdict(data["verdict"]),
                   reason=data.get("reason", ""), evidence=Evidence.from_dict(data.get("evidence") or {}),
                   commands=tuple(data.get("commands") or ()), duration_s=float(data.get("duration_s") or 0.0),
                   log_dir=data.get("log_dir"), device=data.get("device"))


@dataclass(frozen=True)
class Outcome:
    """The verdict of one entry against one build, with every attempt behind it."""

    entry_id: str
    verdict: Verdict
    reason: str
    attempts: tuple[Attempt, ...] = ()
    warnings: tuple[str, ...] = ()
    step: str | None = None
    duration_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    range: RangeEvidence | None = None        # what the entry's affected ranges say about the judged tree

    @property
    def k(self) -> int:
        return sum(1 for a in self.attempts if a.verdict is Verdict.CONFIRMED)

    @property
    def n(self) -> int:
        return len(self.attempts)

    @property
    def k_of_n(self) -> str:
        return f"{self.k}/{self.n}" if self.n else "-"

    @property
    def rate(self) -> Rate | None:
        """How often the defect showed over the runs that were judged (confirmed or not-reproduced),
        with its interval; None for a single run, where an interval says nothing useful."""
        judged = [a for a in self.attempts if a.verdict in (Verdict.CONFIRMED, Verdict.NOT_REPRODUCED)]
        if len(self.attempts) < 2 or not judged:
            return None
        return Rate(k=self.k, n=len(judged))

    def to_dict(self) -> dict[str, Any]:
        data = {
            "entry": self.entry_id, "verdict": self.verdict.value, "reason": self.reason,
            "k": self.k, "n": self.n, "step": self.step, "warnings": list(self.warnings),
            "duration_s": round(self.duration_s, 3),
            "attempts": [a.to_dict() for a in self.attempts], "extra": _plain(dict(self.extra)),
            **({"rate": self.rate.to_dict()} if self.rate else {}),
        }
        if self.range is not None:
            data["range"] = self.range.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Outcome":
        """The outcome ``to_dict`` wrote (``k`` and ``n`` are recomputed from the attempts); files
        written before outcomes carried ``range`` read with None."""
        rng = data.get("range")
        return cls(entry_id=data["entry"], verdict=Verdict(data["verdict"]), reason=data.get("reason", ""),
                   attempts=tuple(Attempt.from_dict(a) for a in data.get("attempts") or ()),
                   warnings=tuple(data.get("warnings") or ()), step=data.get("step"),
                   duration_s=float(data.get("duration_s") or 0.0), extra=dict(data.get("extra") or {}),
                   range=RangeEvidence.from_dict(rng) if isinstance(rng, Mapping) else None)


def aggregate(attempts: Iterable[Attempt]) -> tuple[Verdict, str]:
    """k-of-N: one confirmed run confirms a flaky defect; otherwise the runs must agree.

    All runs not-reproduced → not-reproduced; all not-applicable → not-applicable;
    any mixture without a confirmation → inconclusive, naming the first odd run.
    """
    attempts = list(attempts)
    if not attempts:
        return Verdict.ERROR, "no attempt was made"
    confirmed = [a for a in attempts if a.verdict is Verdict.CONFIRMED]
    if confirmed:
        return Verdict.CONFIRMED, f"{len(confirmed)}/{len(attempts)} runs matched the signature: {confirmed[0].reason}"
    kinds = {a.verdict for a in attempts}
    if len(kinds) == 1:
        only = attempts[0].verdict
        suffix = f" (all {len(attempts)} runs)" if len(attempts) > 1 else ""
        return only, attempts[0].reason + suffix
    odd = next(a for a in attempts if a.verdict is not Verdict.NOT_REPRODUCED)
    return Verdict.INCONCLUSIVE, f"runs disagree; run {odd.index} was {odd.verdict.value}: {odd.reason}"


def _plain(value: Any) -> Any:
    """Make dataclass/tuple/Path values JSON-friendly."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
