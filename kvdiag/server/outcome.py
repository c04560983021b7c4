"""What one server attempt came to, as values the engine's judge already understands.

A server attempt ends in exactly one of these outcomes (``ServerOutcome.kind``):

=====================  =====================================================  ==========================
outcome                what happened                                          the result's flags
=====================  =====================================================  ==========================
``completed``          every request answered 200 with a completion           ``ok``
``request-failed``     an HTTP error status, an unreadable answer, or a       not ``ok``
                       connection closed while the server kept running
``connection-dropped`` the server died while a request was in flight          not ``ok``; its exit/signal
``server-exited``      the server died before it was ready, or between        not ``ok``; its exit/signal
                       requests
``health-timeout``     ``/health`` never answered 200 before the deadline     ``timed_out``
``hang``               a request got no answer before the deadline            ``timed_out``
``interrupted``        Ctrl-C in kvdiag                                       ``interrupted``
=====================  =====================================================  ==========================

:class:`ServerResult` has the interface ``kvdiag.engine.evidence.observe`` and the judge
read from a ``CommandResult`` (``stdout_text()``, ``combined_text()``, ``ok``,
``timed_out``, ``describe()``, ``to_dict()``…), so a server's logs go through
the same abort parser and signature matchers as any command. The judge then
maps the outcomes as it maps any command: a matching signature confirms first
(an abort in the logs of a ``connection-dropped`` run); ``hang`` and
``health-timeout`` are timeouts (inconclusive); ``request-failed``,
``server-exited`` and ``connection-dropped`` without the signature are "a
different failure" (inconclusive, quoting this description and the abort);
``completed`` is a clean run (not-reproduced once the detector's gate allows).

The server is stopped by kvdiag after every outcome, so its exit status after a
``completed`` run is kvdiag's SIGTERM (or the server's own clean shutdown), not
a failure: ``ok`` follows the outcome, not the status.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

OUTCOMES = ("completed", "request-failed", "connection-dropped", "server-exited", "health-timeout", "hang",
            "interrupted")
TIMEOUT_OUTCOMES = ("health-timeout", "hang")
DIED_OUTCOMES = ("connection-dropped", "server-exited")

_CUDA_ERROR = re.compile(r"CUDA error: .*")
LAST_LINES = 20
from kvdiag.proc.logfiles import LogTexts
from kvdiag.proc.result import result_dict


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_text(returncode: int | None, signum: int | None) -> str:
    if signum is not None:
        return f"killed by {signal_name(signum)} ({signum})"
    if returncode is not None:
        return f"exit {returncode}"
    return "still running (could not be stopped)"


@dataclass(frozen=True)
class RequestRecord:
    """One completion request and what came back."""

    index: int                          # 1-based
    outcome: str                        # completed | request-failed | connection-dropped | hang | server-exited
    elapsed_s: float
    status: int | None = None
    error: str | None = None
    tokens_predicted: int | None = None
    tokens_evaluated: int | None = None
    stop_type: str | None = None
    content_chars: int | None = None
    timings: Mapping[str, Any] = field(default_factory=dict)
    draft: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "outcome": self.outcome, "elapsed_s": round(self.elapsed_s, 3),
                "status": self.status, "error": self.error, "tokens_predicted": self.tokens_predicted,
                "tokens_evaluated": self.tokens_evaluated, "stop_type": self.stop_type,
                "content_chars": self.content_chars, "timings": dict(self.timings), "draft": dict(self.draft)}


def draft_stats(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Speculative-decoding counters of a ``/completion`` answer.

    llama-server puts ``draft_n`` / ``draft_n_accepted`` into ``timings`` when a
    draft model (or MTP head) proposed tokens; forks have put ``draft_*`` keys at
    the top level. Both are collected; the acceptance rate is derived when both
    counts are there.
    """
    out: dict[str, Any] = {}
    timings = doc.get("timings") if isinstance(doc.get("timings"), Mapping) else {}
    for source in (doc, timings):
        for key, value in source.items():
            if key.startswith("draft") and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(key, value)
    n, accepted = out.get("draft_n"), out.get("draft_n_accepted")
    if isinstance(n, (int, float)) and isinstance(accepted, (int, float)) and n > 0:
        out["acceptance"] = round(accepted / n, 4)
    return out


@dataclass(frozen=True)
class ServerOutcome:
    """The outcome of one server attempt and everything behind it."""

    kind: str
    detail: str
    port: int | None = None
    requests: tuple[RequestRecord, ...] = ()
    requests_planned: int = 0
    ready_after_s: float | None = None
    loading_replies: int = 0            # 503 answers of /health before it was ready
    exited_by_itself: bool = False      # the server ended before kvdiag stopped it
    returncode: int | None = None
    signal: int | None = None
    stopped_with: str | None = None     # SIGTERM / SIGKILL when kvdiag had to stop it
    survivors: tuple[int, ...] = ()
    last_lines: tuple[str, ...] = ()
    cuda_errors: tuple[str, ...] = ()

    @property
    def completed(self) -> int:
        return sum(1 for r in self.requests if r.outcome == "completed")

    def describe(self) -> str:
        """One line for the judge's reasons: what happened, and how the server ended."""
        ended = exit_text(self.returncode, self.signal)
        if self.kind == "completed":
            how = f"stopped by kvdiag with {self.stopped_with}: {ended}" if self.stopped_with else ended
            return f"the server answered {self.completed}/{self.requests_planned} request(s) ({how})"
        if self.kind in TIMEOUT_OUTCOMES:
            return f"timed out: {self.detail} (process group killed)"
        if self.kind == "interrupted":
            return "interrupted"
        if self.kind in DIED_OUTCOMES:
            return f"{self.detail}: {ended}"
        return f"{self.detail} (then stopped by kvdiag: {ended})" if self.stopped_with else self.detail

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.kind, "detail": self.detail, "description": self.describe(), "port": self.port,
            "requests_planned": self.requests_planned, "requests_completed": self.completed,
            "requests": [r.to_dict() for r in self.requests],
            "ready_after_s": None if self.ready_after_s is None else round(self.ready_after_s, 3),
            "loading_replies": self.loading_replies, "exited_by_itself": self.exited_by_itself,
            "returncode": self.returncode, "signal": self.signal,
            "signal_name": signal_name(self.signal) if self.signal is not None else None,
            "stopped_with": self.stopped_with, "survivors": list(self.survivors),
            "last_lines": list(self.last_lines), "cuda_errors": list(self.cuda_errors),
        }


def log_tail(text: str, n: int = LAST_LINES) -> tuple[str, ...]:
    return tuple(line for line in text.splitlines() if line.strip())[-n:]


def cuda_error_lines(text: str) -> tuple[str, ...]:
    """Every ``CUDA error: …`` line of a log, in order, without duplicates."""
    return tuple(dict.fromkeys(m.group(0).strip() for m in _CUDA_ERROR.finditer(text)))


@dataclass(frozen=True)
class ServerResult(LogTexts):
    """A server attempt in the shape of ``kvdiag.proc.runner.CommandResult``.

    ``returncode``/``signal`` are the server's (its leader's) final status,
    whoever ended it; ``ok``/``timed_out``/``interrupted`` follow the outcome.
    """

    argv: tuple[str, ...]
    returncode: int | None
    signal: int | None
    duration_s: float
    log_dir: Path
    stdout_path: Path
    stderr_path: Path
    combined_path: Path
    started_at: str
    server: ServerOutcome
    executable: str = ""
    pid: int | None = None
    timeout_s: float | None = None
    survivors: tuple[int, ...] = ()
    log_lost: tuple[tuple[str, int], ...] = ()   # as CommandResult's: a refused log write
    log_error: str | None = None

    @property
    def outcome(self) -> str:
        return self.server.kind

    @property
    def ok(self) -> bool:
        return self.server.kind == "completed"

    @property
    def timed_out(self) -> bool:
        return self.server.kind in TIMEOUT_OUTCOMES

    @property
    def interrupted(self) -> bool:
        return self.server.kind == "interrupted"

    def describe(self) -> str:
        return self.server.describe()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "server", **result_dict(self), "server": self.server.to_dict()}
