"""A registry site found again in a tree whose lines moved, the way a patch hunk finds its place.

A site names the text its line holds (``holds``) and, where that text is common
(``__syncthreads();`` is in a dozen places of one file), the line that leads to it
(``anchor``): the site is the first line holding ``holds`` after a line holding
``anchor``, before the block the anchor opens closes (or, when the anchor opens
none, its enclosing block). Both are matched ignoring whitespace, so a reformatted
tree still matches. The lines the site was seen at in known trees (``at``, commit
to line) are a record to check against, never a place to look: a site is found by
its text, and when its text leads to no line, or to several, that is what is said
(the candidates listed with their context), not the nearest line by number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

FOUND, AMBIGUOUS, NOT_FOUND = "found", "ambiguous", "not found"
CONFLICT, UNPLACED = "conflict", "unplaced"
_SPACE = re.compile(r"\s+")


def squeeze(text: str) -> str:
    """``text`` without whitespace: how a site's texts are compared with a tree's lines."""
    return _SPACE.sub("", text)


@dataclass(frozen=True)
class SiteSpec:
    """One `location.sites` table: where in ``file`` the defect's construct is."""

    file: str
    holds: str
    anchor: str | None = None
    at: Mapping[str, int] = field(default_factory=dict)     # commit -> the line it was seen at

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> "SiteSpec":
        """A linted table; the older ``line`` + ``commit`` keys read as one ``at`` record."""
        at = {str(k): int(v) for k, v in (table.get("at") or {}).items()}
        if "line" in table and table.get("commit"):
            at.setdefault(str(table["commit"]), int(table["line"]))
        return cls(file=table["file"], holds=table["holds"], anchor=table.get("anchor"), at=at)

    def recorded_for(self, commit: str | None) -> tuple[str, int] | None:
        """The line recorded for ``commit`` (either hash a prefix of the other), if any."""
        if not commit:
            return None
        for recorded, line in self.at.items():
            if recorded and (commit.startswith(recorded) or recorded.startswith(commit)):
                return recorded, line
        return None

    def describe(self) -> str:
        """How the site is found, in words: what a reader looks for in the file."""
        if self.anchor:
            return f"the first `{self.holds}` in the block of `{self.anchor}`"
        return f"the line holding `{self.holds}`"

    def recorded(self) -> str:
        """``1538 at d99724f2, 1607 at 775450a68`` (empty when none is recorded)."""
        return ", ".join(f"{line} at {commit}" for commit, line in self.at.items())


@dataclass(frozen=True)
class Candidate:
    """A line the site's text leads to, with the line that led there."""

    line: int
    context: str

    def __str__(self) -> str:
        return f"line {self.line} ({self.context})"


@dataclass(frozen=True)
class Located:
    """Where a site is in one file: exactly one line, several candidates, or none (and why)."""

    state: str                                   # FOUND | AMBIGUOUS | NOT_FOUND
    candidates: tuple[Candidate, ...] = ()
    why: str = ""

    @property
    def line(self) -> int | None:
        return self.candidates[0].line if self.state == FOUND else None

    def describe(self) -> str:
        if self.state == FOUND:
            return f"line {self.line}"
        if self.state == AMBIGUOUS:
            return f"ambiguous: {len(self.candidates)} candidates, " + "; ".join(map(str, self.candidates))
        return f"not found: {self.why}"


@dataclass(frozen=True)
class Placement:
    """The site's line in one tree, and how that was known. ``state``: FOUND (``line`` is it),
    CONFLICT (its context leads to ``line``, the record for this commit says ``recorded``),
    AMBIGUOUS or NOT_FOUND (by its context; ``detail`` lists the candidates or says why), UNPLACED
    (no source tree here and no line recorded for this commit)."""

    state: str
    file: str                       # as the tree names it (as the registry wrote it when unread)
    line: int | None = None
    how: str = ""                   # "by its context" | "recorded for <commit>"
    detail: str = ""
    recorded: int | None = None     # the line recorded for this tree's commit, if any

    @property
    def at(self) -> str | None:
        return f"{self.file}:{self.line}" if self.line is not None else None


def place(spec: SiteSpec, rel: str | None, located: Located | None, commit: str | None) -> Placement:
    """Where the site is in a tree whose file ``rel`` gave ``located`` (both None: no source here).

    The source decides: a line found by the site's context is the site, and a record for this
    commit that says otherwise is a conflict. Only where the context leads to several lines does
    this commit's record pick among them (never a line the context did not lead to); only where
    the source cannot be read does the record stand alone."""
    record = spec.recorded_for(commit)
    recorded = record[1] if record else None
    by_record = f"recorded for {record[0]}" if record else ""
    if located is None:
        if record:
            return Placement(FOUND, spec.file, recorded, by_record, "no source tree to read", recorded)
        return Placement(UNPLACED, spec.file, detail="no source tree to read, and no line recorded for "
                         f"commit {commit or '(unknown)'}" + (f" (recorded: {spec.recorded()})" if spec.at else ""))
    file = rel or spec.file
    if located.state == FOUND:
        if recorded is not None and recorded != located.line:
            return Placement(CONFLICT, file, located.line, "by its context",
                             f"its context leads to line {located.line}, but line {recorded} is {by_record}",
                             recorded)
        return Placement(FOUND, file, located.line, "by its context", recorded=recorded)
    if located.state == AMBIGUOUS and recorded in {c.line for c in located.candidates}:
        return Placement(FOUND, file, recorded, by_record,
                         f"its context is ambiguous here ({len(located.candidates)} candidates)", recorded)
    return Placement(located.state, file, detail=located.describe(), recorded=recorded)


def locate(spec: SiteSpec, text: str) -> Located:
    """The line of ``text`` (a file's contents) the site is at, by its context alone."""
    lines = text.splitlines()
    holds = squeeze(spec.holds)
    if not spec.anchor:
        hits = [i for i, line in enumerate(lines) if holds in squeeze(line)]
        found = [Candidate(i + 1, _context(lines, i)) for i in hits]
        return _verdict(found, f"no line holds `{spec.holds}`")
    anchor = squeeze(spec.anchor)
    anchors = [i for i, line in enumerate(lines) if anchor in squeeze(line)]
    if not anchors:
        return Located(NOT_FOUND, why=f"no line holds the anchor `{spec.anchor}`")
    found: dict[int, Candidate] = {}
    for a in anchors:
        hit = next((j for j in range(a + 1, block_end(lines, a)) if holds in squeeze(lines[j])), None)
        if hit is not None and hit + 1 not in found:
            found[hit + 1] = Candidate(hit + 1, f"in the block of line {a + 1}: `{lines[a].strip()}`")
    where = ", ".join(str(a + 1) for a in anchors)
    return _verdict(list(found.values()), f"`{spec.holds}` is not in the block of the anchor (line {where})")


def _verdict(found: Sequence[Candidate], why: str) -> Located:
    if not found:
        return Located(NOT_FOUND, why=why)
    return Located(FOUND if len(found) == 1 else AMBIGUOUS, tuple(found))


def _context(lines: list[str], index: int) -> str:
    """The nearest code line before ``index``, to tell one bare hit from another."""
    for j in range(index - 1, -1, -1):
        code = _code(lines[j]).strip()
        if code:
            return f"after line {j + 1}: `{lines[j].strip()}`"
    return "at the top of the file"


def block_end(lines: list[str], start: int) -> int:
    """The index of the line that closes the block opened on or after line ``start`` (or, when a
    statement ends before any block opens, the block enclosing it); ``len(lines)`` when unclosed.
    The site is searched for between ``start`` and that line."""
    depth = 0
    opened = False
    in_comment = False
    for i in range(start, len(lines)):
        code, in_comment = _strip(lines[i], in_comment)
        for ch in code:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
                if depth == 0 and opened or depth < 0:
                    return i
            elif ch == ";" and depth == 0 and not opened:
                opened = True          # a statement: its scope is the enclosing block
                depth = 1
    return len(lines)


def _code(line: str) -> str:
    return _strip(line, False)[0]


_TOKENS = re.compile(r'//|/\*|\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def _strip(line: str, in_comment: bool) -> tuple[str, bool]:
    """A line's code without comments and string or character literals (braces in them do not
    count); whether a block comment is still open at its end."""
    out: list[str] = []
    pos = 0
    while pos <= len(line):
        if in_comment:
            end = line.find("*/", pos)
            if end < 0:
                return "".join(out), True
            pos, in_comment = end + 2, False
            continue
        m = _TOKENS.search(line, pos)
        if m is None:
            out.append(line[pos:])
            break
        out.append(line[pos:m.start()])
        token = m.group()
        if token == "//":
            break
        if token == "/*":
            in_comment = True
        elif token != "*/":
            out.append(" ")
        pos = m.end()
    return "".join(out), in_comment
