"""One entry's result within a sweep, typed: its `Outcome` plus what the formatters need about the entry.

A sweep file's ``outcomes`` hold ``SweepOutcome.to_dict()``: the outcome's own keys
(``Outcome.to_dict()``) beside ``title``, ``run_dir``, ``files`` (the entry's source
files as the registry names them), ``device`` (the GPU whose worker produced it) and,
from format /2 on, ``sources`` (the same files as paths of the swept tree, absent when
that tree could not be read). Files of format /1 (kvdiag 0.1.x) lack ``sources`` and,
before 0.1.1, ``device``; they read with those as None.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from kvdiag.records.verdict import Outcome, _plain

__all__ = ["SweepOutcome"]

_OWN_KEYS = ("title", "run_dir", "files", "device", "sources")


@dataclass(frozen=True)
class SweepOutcome(Outcome):
    """An `Outcome` as a sweep keeps it: every formatter and store reader takes this."""

    title: str = ""
    run_dir: str | None = None
    files: tuple[str, ...] = ()
    device: Mapping[str, Any] | None = None
    sources: tuple[str, ...] | None = None

    @classmethod
    def of(cls, outcome: Outcome, *, title: str = "", run_dir: str | None = None, files: Iterable[str] = (),
           device: Mapping[str, Any] | None = None, sources: Iterable[str] | None = None) -> "SweepOutcome":
        base = {f.name: getattr(outcome, f.name) for f in fields(Outcome)}
        return cls(**base, title=title, run_dir=run_dir, files=tuple(files), device=dict(device) if device else None,
                   sources=tuple(sources) if sources is not None else None)

    def to_dict(self) -> dict[str, Any]:
        data = {**super().to_dict(), "title": self.title, "run_dir": self.run_dir, "files": list(self.files),
                "device": _plain(dict(self.device)) if self.device else None}
        if self.sources is not None:
            data["sources"] = list(self.sources)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SweepOutcome":
        sources = data.get("sources")
        return cls.of(Outcome.from_dict(data), title=str(data.get("title") or ""), run_dir=data.get("run_dir"),
                      files=tuple(str(f) for f in data.get("files") or ()), device=data.get("device"),
                      sources=tuple(str(s) for s in sources) if isinstance(sources, list) else None)
