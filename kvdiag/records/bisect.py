"""A bisection's records, typed: its direction, each step it ran, the commit it found.

``kvdiag bisect`` looks for one of two commits on a range OLD..NEW (OLD an
ancestor of NEW):

* **cause** (the default): the first commit where the entry is *confirmed*. OLD
  must be not-reproduced, NEW confirmed. git's own terms: good (old), bad (new).
* **fix** (``--fix``): the first commit where the entry is *not reproduced* any
  more. OLD must be confirmed, NEW not-reproduced. git runs with the terms
  ``broken`` (old) and ``fixed`` (new), so its own messages read the right way
  ("… is the first fixed commit").

A step's verdict maps to git's answer by the direction; anything but those two
verdicts (a build that fails, skipped, not-applicable, inconclusive, an error of
kvdiag's) is a skip, which git never blames. ``bisect-steps.json`` holds one
`StepRecord` per commit judged, the two ends first; run.json's ``bisect`` key a
`BisectRecord`. Files written before the direction existed (no ``direction``,
``good``/``bad`` instead of ``old``/``new``, no per-phase times) read as cause
bisections with those values absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from kvdiag.exitcodes import ExitCode

__all__ = ["BisectRecord", "CommitEvidence", "Direction", "StepRecord", "GOOD", "BAD", "SKIP",
           "ROLE_OLD", "ROLE_NEW", "ROLE_STEP", "STEPS_FILE"]

GOOD, BAD, SKIP = 0, 1, 125            # git bisect run: 0 old, 1 new, 125 skip
STEPS_FILE = "bisect-steps.json"       # a bisection's steps, in its run folder, one StepRecord each
ROLE_OLD, ROLE_NEW, ROLE_STEP = "old end", "new end", "step"


class Direction(str, Enum):
    CAUSE = "cause"
    FIX = "fix"

    @property
    def old_verdict(self) -> str:
        """The verdict the OLD end must have."""
        return "not-reproduced" if self is Direction.CAUSE else "confirmed"

    @property
    def new_verdict(self) -> str:
        return "confirmed" if self is Direction.CAUSE else "not-reproduced"

    @property
    def terms(self) -> tuple[str, str]:
        """git's names for (old, new) in this direction."""
        return ("good", "bad") if self is Direction.CAUSE else ("broken", "fixed")

    @property
    def found_label(self) -> str:
        return "introduced by" if self is Direction.CAUSE else "fixed by"

    @property
    def found_means(self) -> str:
        return ("the first commit where it is confirmed" if self is Direction.CAUSE
                else "the first commit where it is not reproduced")

    def git_answer(self, verdict: str) -> int:
        """git bisect run's exit for a step's verdict: the old term 0, the new term 1, else skip."""
        if verdict == self.old_verdict:
            return GOOD
        if verdict == self.new_verdict:
            return BAD
        return SKIP

    def term_of(self, exit_code: int | None) -> str:
        old, new = self.terms
        return {GOOD: old, BAD: new}.get(exit_code, "skip")    # type: ignore[arg-type]


def _seconds(value: Any) -> float | None:
    return round(float(value), 3) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StepRecord:
    """What one step found at one commit: its verdict, what git was told, and where the time went."""

    commit: str
    verdict: str            # a Verdict value, or "build-failed" / "error"
    reason: str
    exit: int               # what git was told: 0, 1 or 125
    run_dir: str | None = None
    duration_s: float = 0.0            # the whole step: checkout to verdict
    build_log: str | None = None
    role: str = ROLE_STEP              # "old end", "new end" or "step"
    # Where the time went. A build's configure (None: the recipe has no configure command) and build; a
    # compile step (D7) builds nothing first, and its own scratch configure and object build are given
    # here instead, the run then being the rest of the entry's run (the compile control, judging).
    configure_s: float | None = None
    build_s: float | None = None
    run_s: float | None = None         # None when no run happened (a failed build)
    # Taken from the earlier bisection with this run id (`kvdiag bisect --resume`), not built and run in
    # this one: the times are what it cost there.
    reused_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"commit": self.commit, "role": self.role, "verdict": self.verdict, "reason": self.reason,
                "exit": self.exit, "run_dir": self.run_dir, "duration_s": round(self.duration_s, 3),
                "configure_s": _seconds(self.configure_s), "build_s": _seconds(self.build_s),
                "run_s": _seconds(self.run_s), "build_log": self.build_log}
        if self.reused_from:
            data["reused_from"] = self.reused_from
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StepRecord":
        exit_code = data.get("exit")
        return cls(commit=str(data.get("commit") or "unknown"), verdict=str(data.get("verdict") or "error"),
                   reason=str(data.get("reason") or ""), exit=exit_code if isinstance(exit_code, int) else SKIP,
                   run_dir=data.get("run_dir"), duration_s=_seconds(data.get("duration_s")) or 0.0,
                   build_log=data.get("build_log"), role=str(data.get("role") or ROLE_STEP),
                   configure_s=_seconds(data.get("configure_s")), build_s=_seconds(data.get("build_s")),
                   run_s=_seconds(data.get("run_s")), reused_from=data.get("reused_from") or None)


@dataclass(frozen=True)
class CommitEvidence:
    """A commit the bisection names, with what its own step found there (None: not tested)."""

    commit: str
    subject: str
    verdict: str | None
    reason: str
    run_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "subject": self.subject, "verdict": self.verdict, "reason": self.reason,
                "run_dir": self.run_dir}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "CommitEvidence | None":
        if not isinstance(data, Mapping) or not data.get("commit"):
            return None
        return cls(str(data["commit"]), str(data.get("subject") or ""), data.get("verdict"),
                   str(data.get("reason") or ""), data.get("run_dir"))


@dataclass(frozen=True)
class BisectRecord:
    """A whole bisection: the range, its direction, the steps, and the commit found (or why none)."""

    entry_id: str
    direction: Direction
    old: str
    new: str
    found: CommitEvidence | None          # the first new-term commit (introducing, or fixing)
    parent: CommitEvidence | None         # its first parent, with that commit's evidence
    candidates: tuple[str, ...]           # only skipped commits left: the found commit is one of these
    steps: tuple[StepRecord, ...]
    message: str
    run_dir: str
    ends_verified: bool = True
    status_unchanged: bool = True
    source: str | None = None             # the source tree bisected (a path on the machine that ran it)
    repository: str | None = None         # its origin remote's URL, when it has one
    launcher: str | None = None           # ccache / sccache put in front of the compilers
    first_parent: bool = False            # git bisect --first-parent: merges judged, their sides not visited
    extra: Mapping[str, Any] = field(default_factory=dict)
    marks_recorded: bool = True           # every good/bad mark in git's log is a verdict a step recorded

    @property
    def exit_code(self) -> int:
        """0: a commit was found; 4: the ends did not hold, or skipped commits leave it ambiguous; 70: the
        source tree's status changed under the bisection, or git acted on an answer no step recorded."""
        if not (self.status_unchanged and self.marks_recorded):
            return int(ExitCode.HARNESS)
        return int(ExitCode.OK) if self.found is not None else int(ExitCode.INCONCLUSIVE)

    def ends(self) -> tuple[StepRecord | None, StepRecord | None]:
        old = next((s for s in self.steps if s.role == ROLE_OLD), None)
        new = next((s for s in self.steps if s.role == ROLE_NEW), None)
        return old, new

    def skipped(self) -> list[StepRecord]:
        return [s for s in self.steps if s.exit == SKIP]

    def to_dict(self) -> dict[str, Any]:
        found = self.found.to_dict() if self.found else None
        data = {"entry": self.entry_id, "direction": self.direction.value, "old": self.old, "new": self.new,
                "terms": list(self.direction.terms), "found": found,
                "parent": self.parent.to_dict() if self.parent else None, "candidates": list(self.candidates),
                "steps": [s.to_dict() for s in self.steps], "message": self.message, "run_dir": self.run_dir,
                "ends_verified": self.ends_verified, "source_status_unchanged": self.status_unchanged,
                "source": self.source, "repository": self.repository, "launcher": self.launcher,
                "first_parent": self.first_parent, "git_marks_recorded": self.marks_recorded,
                "exit_code": self.exit_code, **self.extra}
        # the cause direction's historical names, kept for readers of kvdiag 0.1.x's bisect records
        if self.direction is Direction.CAUSE:
            data.update(good=self.old, bad=self.new, first_bad=found)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BisectRecord":
        direction = Direction(str(data.get("direction") or "cause"))
        old = str(data.get("old") or data.get("good") or "")
        new = str(data.get("new") or data.get("bad") or "")
        found = data.get("found") if "found" in data else data.get("first_bad")
        own = {"entry", "direction", "old", "new", "terms", "found", "parent", "candidates", "steps", "message",
               "run_dir", "ends_verified", "source_status_unchanged", "source", "repository", "launcher",
               "first_parent", "git_marks_recorded", "good", "bad", "first_bad", "exit_code"}
        return cls(entry_id=str(data.get("entry") or ""), direction=direction, old=old, new=new,
                   found=CommitEvidence.from_dict(found), parent=CommitEvidence.from_dict(data.get("parent")),
                   candidates=tuple(str(c) for c in data.get("candidates") or ()),
                   steps=tuple(StepRecord.from_dict(s) for s in data.get("steps") or () if isinstance(s, Mapping)),
                   message=str(data.get("message") or ""), run_dir=str(data.get("run_dir") or ""),
                   ends_verified=bool(data.get("ends_verified", True)),
                   status_unchanged=bool(data.get("source_status_unchanged", True)),
                   source=data.get("source"), repository=data.get("repository"), launcher=data.get("launcher"),
                   first_parent=bool(data.get("first_parent", False)),
                   extra={k: v for k, v in data.items() if k not in own},
                   marks_recorded=bool(data.get("git_marks_recorded", True)))


def steps_from(data: Sequence[Any]) -> list[StepRecord]:
    """``bisect-steps.json``'s list as records (anything that is not an object is dropped)."""
    return [StepRecord.from_dict(s) for s in data if isinstance(s, Mapping)]
