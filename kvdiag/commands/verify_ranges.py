"""`kvdiag registry verify`'s ranges: which entries the tree's place puts outside their code.

An entry's code facts (its files, functions and sites) hold only where its code is: a fix that
rewrote the kernel takes them away (D17 after 4c540d0b), and a tree older than the defect never had
them. verify asks the entry's ranges where the tree lies, as a run does (git, or placement by blobs
for a tarball or a shallow clone), and tells such facts as the range says, not as mismatches.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable

from kvdiag.engine.verdict.placement import tree_range_evidence
from kvdiag.registry.entry import Entry
from kvdiag.workspace.history import TreeHistory

__all__ = ["outside_ranges"]


def outside_ranges(entries: Iterable[Entry], source: Path) -> dict[str, str]:
    """Why each entry's ranges place the tree outside (before its code, or past the fix that removed
    it), as a run judges them: by git, or by placement for a tree without a usable history."""
    with tempfile.TemporaryDirectory(prefix="kvdiag-verify-") as tmp:
        history = TreeHistory(source, Path(tmp))
        said = {entry.id: tree_range_evidence(entry, history) for entry in entries}
    # only the entry's own range for this tree's repository: "the entry records the defect only in
    # another repository" says nothing of where this tree's code should be
    return {i: ev.summary for i, ev in said.items() if ev.says_absent and ev.findings}
