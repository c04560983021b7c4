"""Histories that answer `TreeHistory`'s questions for a commit the tree was placed at, not a checked-out HEAD.

A tree without ``.git`` (a release tarball) or a shallow clone is placed by its
files' content in another history (``kvdiag.workspace.placement.blob_timeline``). The range
check then asks the same questions as for a git tree (is the introducing commit
an ancestor of HEAD, is the fix?) of one of these:

- `PlacedHistory`: a clone or mirror the user names (``--history REPO``), with the
  placed commit standing in for HEAD; git answers, as for the user's own clone.
- `LineHistory`: the timeline kvdiag ships, with no git at all. Positions on its
  first-parent line order the commits it names; ggml's line is linear, so a lower
  position is an ancestor. A commit it does not name is not one it can answer for:
  the caller checks the range's commits are named before asking.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from kvdiag.workspace.placement.blob_timeline import Timeline
from kvdiag.workspace.history import HistoryFacts, TreeHistory

__all__ = ["LineHistory", "PlacedHistory"]


class PlacedHistory(TreeHistory):
    """The history at ``repo_dir`` (a clone or a mirror), judged as if ``head`` were checked out."""

    def __init__(self, repo_dir: Path, head: str, log_dir: Path):
        super().__init__(repo_dir, log_dir)
        self.placed_head = head

    def _read_facts(self) -> HistoryFacts:
        facts = super()._read_facts()
        if facts.head is None:
            return facts
        roots = facts.roots
        if not facts.shallow:
            found = self._git(["rev-list", "--max-parents=0", self.placed_head], "git-roots-placed")
            roots = tuple(found.stdout_text().split()) if found is not None and found.ok else roots
        return dataclasses.replace(facts, head=self.placed_head, roots=roots)


class LineHistory:
    """`TreeHistory`'s questions answered from a shipped timeline's first-parent positions."""

    def __init__(self, timeline: Timeline, head: str):
        self.timeline = timeline
        self.head = head
        self.memo: dict[str, object] = {}

    def facts(self) -> HistoryFacts:
        return HistoryFacts(head=self.head, why_none=None, shallow=False, remote_urls=(self.timeline.repo,))

    def look_up(self, commits: Iterable[str]) -> None:
        """Nothing to ask: the timeline is in memory."""

    def has_commit(self, commit: str) -> bool:
        return self.timeline.position(commit) is not None

    def is_ancestor(self, older: str, newer: str) -> bool | None:
        a, b = self.timeline.position(older), self.timeline.position(newer)
        return None if a is None or b is None else a <= b

    def knows(self, commits: Iterable[str]) -> list[str]:
        """The commits of ``commits`` the timeline does not name (it cannot order those)."""
        return [c for c in commits if c not in ("0", "*") and self.timeline.position(c) is None]
