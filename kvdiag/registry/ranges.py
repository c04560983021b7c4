"""An entry's ``[[affected]]`` tables, typed: OSV GIT ranges, one per table.

A table names a repository and the commits of its timeline, as OSV does:
``introduced`` (``"0"``: from the beginning), ``fixed`` (the first commit that
has the fix; several for cherry-picks on other branches), ``last_affected``
(the last commit known to have it, when the fix is not known) and ``limit``
(the range covers only ancestors of a limit; ``"*"``: no limit). Each key takes
one commit or an array of them. Commits are full 40-hex ids: a short id can
become ambiguous as a repository grows, and OSV requires full ones.

`range_problems` is what `kvdiag registry lint` says about a table; the engine
evaluates ranges against a tree (``kvdiag.engine.verdict.ranges``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from kvdiag.registry.repos import KNOWN_REPOS, known_repo

__all__ = ["EVENT_KEYS", "GitRange", "range_problems"]

EVENT_KEYS = ("introduced", "fixed", "last_affected", "limit")
_FULL_ID = re.compile(r"^[0-9a-f]{40}$")


def _commits(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class GitRange:
    """One OSV GIT range of one repository."""

    repo: str
    introduced: tuple[str, ...]
    fixed: tuple[str, ...] = ()
    last_affected: tuple[str, ...] = ()
    limit: tuple[str, ...] = ()
    note: str = ""

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> "GitRange":
        return cls(repo=str(table["repo"]), introduced=_commits(table.get("introduced")),
                   fixed=_commits(table.get("fixed")), last_affected=_commits(table.get("last_affected")),
                   limit=_commits(table.get("limit")), note=str(table.get("note", "")))

    def events(self) -> list[dict[str, str]]:
        """The OSV events, one key each, introduced first (the order OSV recommends)."""
        return [{key: commit} for key in EVENT_KEYS for commit in getattr(self, key)]

    def commits(self) -> tuple[str, ...]:
        """Every commit the range names ("0" and "*" are not commits)."""
        return tuple(c for key in EVENT_KEYS for c in getattr(self, key) if c not in ("0", "*"))

    @property
    def bounded(self) -> tuple[str, ...]:
        """The limits that bound the range ("*" is no bound)."""
        return tuple(c for c in self.limit if c != "*")


def range_problems(table: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every problem of one ``[[affected]]`` table whose keys have the right types."""
    problems: list[tuple[str, str]] = []
    repo = table.get("repo")
    known = known_repo(repo) if isinstance(repo, str) else None
    if known is None:
        problems.append(("repo", f"{repo!r} is not a repository kvdiag knows ({', '.join(KNOWN_REPOS)}): name it "
                                 f"in kvdiag/registry/repos.py with what identifies its clones"))
    elif repo != known.url:
        problems.append(("repo", f"write {repo!r} as {known.url!r}, the url ranges use for it"))
    seen: dict[str, str] = {}
    for key in EVENT_KEYS:
        for commit in _commits(table.get(key)):
            if commit == "0" and key == "introduced" or commit == "*" and key == "limit":
                continue
            if not _FULL_ID.match(commit):
                special = {"introduced": ' (or "0": from the beginning)', "limit": ' (or "*": no limit)'}
                problems.append((key, f"{commit!r} is not a full commit id, 40 lower-case hex digits"
                                      f"{special.get(key, '')}"))
            elif commit in seen:
                problems.append((key, f"{commit[:12]} is both {seen[commit]} and {key}"))
            seen.setdefault(commit, key)
    if not _commits(table.get("introduced")):
        problems.append(("introduced", "a range needs at least one introduced commit (\"0\": from the beginning)"))
    if table.get("fixed") and table.get("last_affected"):
        problems.append(("last_affected", "a range has fixed or last_affected, not both (OSV): keep fixed"))
    return problems
