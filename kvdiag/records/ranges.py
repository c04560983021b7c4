"""What an entry's affected ranges say about the judged tree: the range evidence of a verdict.

Every outcome carries one (``Outcome.range``, ``"range"`` in run.json and in a
sweep's outcomes); formatters only read it. ``status`` is one of:

- ``affected``: HEAD lies inside a range (its introducing commit is an ancestor,
  or "0", and no fix or last-affected commit closes it before HEAD);
- ``fixed``: a range's fix (or a commit after its last_affected) is in HEAD's history;
- ``unaffected``: HEAD is outside every range (before the introducing commit,
  beyond the limits), or the tree is a repository the entry records no range for;
- ``unknown``: the tree cannot be placed (no .git, a shallow clone that lacks
  the commits, a repository kvdiag cannot identify), with the reason;
- ``none``: the entry has no range at all (a build or toolchain defect).

Only ``fixed`` and ``unaffected`` say the defect cannot be in the tree's source.

``placement`` says how the tree was placed in a history (``PLACEMENTS``): ``git``
(its own checked-out commit), ``history`` (its commit or its files' blobs found in a
clone the user named), ``index`` (its files' blobs in the index kvdiag ships),
``stamp`` (ggml's version stamp) or ``unplaced``; ``placed`` says it in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["PLACEMENTS", "RANGE_STATUSES", "RangeEvidence", "RangeFinding"]

RANGE_STATUSES = ("affected", "fixed", "unaffected", "unknown", "none")
PLACEMENTS = ("git", "history", "index", "stamp", "unplaced")

_PHRASE = {"affected": "affected by range", "fixed": "fixed by range", "unaffected": "outside the range",
           "unknown": "range unknown", "none": "no range"}


@dataclass(frozen=True)
class RangeFinding:
    """One range of the entry against the tree."""

    repo: str                 # the range's repository url
    status: str
    detail: str               # "introduced 0, fixed 85f99dca8 not an ancestor of b4e3dc613"

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "status": self.status, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RangeFinding":
        return cls(repo=str(data.get("repo", "")), status=str(data.get("status", "unknown")),
                   detail=str(data.get("detail", "")))


@dataclass(frozen=True)
class RangeEvidence:
    """The entry's ranges against one tree: a status and the git facts behind it."""

    status: str
    detail: str                               # why, in words: the commits and what git said of them
    head: str | None = None                   # the commit judged
    tree: str | None = None                   # what the tree was identified as, and by what
    findings: tuple[RangeFinding, ...] = ()   # each range evaluated
    notes: tuple[str, ...] = ()
    placement: str | None = None              # how the tree was placed (PLACEMENTS); None: not asked
    placed: str | None = None                 # the same in words: "git commit d99724f2", "blob match of …"

    @property
    def says_absent(self) -> bool:
        """The range places the defect outside this tree's source (fixed, or never in it)."""
        return self.status in ("fixed", "unaffected")

    @property
    def says_present(self) -> bool:
        return self.status == "affected"

    @property
    def summary(self) -> str:
        """One line for a verdict: ``affected by range (introduced 0, fixed 85f99dca8 not an ancestor of …)``."""
        said = f"{_PHRASE.get(self.status, self.status)} ({self.detail})" if self.detail else _PHRASE[self.status]
        # a git tree's own commit is already in the detail ("… not an ancestor of b4e3dc613")
        return f"{said}; placed by {self.placed}" if self.placed and self.placement not in ("git", "unplaced") else said

    @property
    def short(self) -> str:
        """A table cell: the status word and the commit judged."""
        word = f"{self.status} @{self.head[:9]}" if self.head and self.status not in ("none",) else self.status
        return f"{word} [{self.placement}]" if self.placement and self.status != "none" else word

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "summary": self.summary, "detail": self.detail, "head": self.head,
                "tree": self.tree, "findings": [f.to_dict() for f in self.findings], "notes": list(self.notes),
                "placement": self.placement, "placed": self.placed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RangeEvidence":
        return cls(status=str(data.get("status", "unknown")), detail=str(data.get("detail", "")),
                   head=data.get("head"), tree=data.get("tree"),
                   findings=tuple(RangeFinding.from_dict(f) for f in data.get("findings") or ()),
                   notes=tuple(str(n) for n in data.get("notes") or ()),
                   placement=data.get("placement"), placed=data.get("placed"))
