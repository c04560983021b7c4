"""The record of one run, as ``<run-dir>/run.json`` holds it, typed.

run.json is written by every kind of run (an entry's verdict, a scan, a sweep, a
verify, a bisect, the doctor): all share ``entry``, ``status`` and ``kind``; an
entry's run adds its :class:`~kvdiag.records.verdict.Outcome`. The rest of a
kind's keys are kept as they are (``fields``), so a reader of one kind need not
know the others. ``schema_version`` says which layout a file has: files written
by kvdiag 0.1.x carry none and read as version 1.

Writers build a record (and move it on with `RunRecord.with_status`); the store's
`RunDir.write_record` is the one place it becomes run.json.

``log_truncated`` is there when a log of the outcome's commands was cut by a write
the OS refused (a full disk): the bytes lost, per log and in all, and the OS's reason.
It is derived from the outcome whenever one is set, so no writer can leave it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from kvdiag.records.verdict import Attempt, Outcome

__all__ = ["RUN_SCHEMA_VERSION", "RunRecord", "log_truncation", "target_record"]

# 1: kvdiag 0.1.x (no schema_version key); 2: the same keys plus schema_version.
RUN_SCHEMA_VERSION = 2
_OWN_KEYS = ("schema_version", "entry", "status", "kind", "outcome")


@dataclass(frozen=True)
class RunRecord:
    entry: str | None                             # None: a drift of an op that names no entry
    status: str                                   # running | finished | interrupted | failed | error
    kind: str | None = None                       # None for an entry's verdict run
    outcome: Outcome | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)   # the kind's own keys, as written
    schema_version: int = RUN_SCHEMA_VERSION

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def with_status(self, status: str, *, outcome: Outcome | None = None, **fields: Any) -> "RunRecord":
        """The same run in a later state: a new status, the outcome once there is one (with its
        ``log_truncated`` when a log was cut), and more keys."""
        outcome = outcome if outcome is not None else self.outcome
        cut = log_truncation(outcome.attempts if outcome is not None else ())
        if cut is not None:
            fields = {**fields, "log_truncated": cut}
        return replace(self, status=status, outcome=outcome, fields={**self.fields, **fields})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema_version": self.schema_version, "entry": self.entry, **self.fields,
                                "status": self.status}
        if self.kind is not None:
            data["kind"] = self.kind
        if self.outcome is not None:
            data["outcome"] = self.outcome.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunRecord":
        outcome = data.get("outcome")
        return cls(entry=data.get("entry"), status=str(data.get("status", "")), kind=data.get("kind"),
                   outcome=Outcome.from_dict(outcome) if isinstance(outcome, Mapping) else None,
                   fields={k: v for k, v in data.items() if k not in _OWN_KEYS},
                   schema_version=int(data.get("schema_version", 1)))



def log_truncation(attempts: Iterable[Attempt]) -> dict[str, Any] | None:
    """What refused log writes cost the attempts' commands: ``{"bytes_lost": N, "logs": {"logs/<file>": n},
    "error": reason}``, N counting each command's most-cut log once; None when every log is whole."""
    logs: dict[str, int] = {}
    total, error = 0, None
    for attempt in attempts:
        for command in attempt.commands:
            lost = command.get("log_lost") or {}
            if not lost:
                continue
            folder = str(command.get("combined_path", "logs/x")).rpartition("/")[0] or "logs"
            logs.update({f"{folder}/{name}": int(n) for name, n in lost.items()})
            total += max(int(n) for n in lost.values())
            error = error or command.get("log_error")
    if not total:
        return None
    return {"bytes_lost": total, "logs": logs, "error": error}


def target_record(target: Mapping[str, Any]) -> RunRecord:
    """The record of a run's setup folder: the target it inspected (build, GPU, tools)."""
    return RunRecord(entry="target", status="finished", fields={"target": target})
