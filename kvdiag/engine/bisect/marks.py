"""Every answer `git bisect run` acted on must be a verdict a step recorded.

git reads a step program's exit status as its answer: 0 the old term, 125 skip, any
other status up to 127 the new term. A step program that dies before it judges (a
traceback, an import that fails after kvdiag was upgraded mid-bisection) exits 1,
and git would blame that commit as if the defect were there. Each step appends its
verdict to ``bisect-steps.json`` before it exits, so a mark of the old or new term in
git's log that no recorded step gave is an answer nobody gave: the bisection then
names no commit and exits 70. Skips need no such proof: git never blames them.
"""

from __future__ import annotations

import re
from typing import Sequence

from kvdiag.records.bisect import BAD, GOOD, Direction, StepRecord

__all__ = ["unrecorded_marks", "unrecorded_message"]

_MARK = re.compile(r"^git bisect (?P<term>\S+) (?P<sha>[0-9a-f]{40})$", re.M)


def unrecorded_marks(bisect_log: str, steps: Sequence[StepRecord], direction: Direction) -> list[tuple[str, str]]:
    """(commit, term) of each mark of the old or new term in git's log that no recorded step answered so."""
    code = {direction.terms[0]: GOOD, direction.terms[1]: BAD}
    answered = {(s.commit, s.exit) for s in steps}
    return [(m["sha"], m["term"]) for m in _MARK.finditer(bisect_log)
            if m["term"] in code and (m["sha"], code[m["term"]]) not in answered]


def unrecorded_message(marks: Sequence[tuple[str, str]]) -> str:
    sha, term = marks[0]
    more = f" (and {len(marks) - 1} more such mark(s))" if len(marks) > 1 else ""
    return (f"git bisect took {sha[:12]} as {term}, but no step recorded that verdict{more}: the step program "
            "ended without judging it (its output is in the run's bisect-run log); no commit is named")
