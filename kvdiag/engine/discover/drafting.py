"""Writing the drafts of a discovery's new roots into a folder, one entry file per root.

Each draft takes the next free id after the registry's and the folder's own (D14, D15, ...),
so that the folder can be used as a registry as it is (`kvdiag --registry DIR run D14`) and its
files can move into registry/ unchanged. A root that an entry already in the folder matches is
not drafted again: running discovery twice into one folder adds only what is new.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from kvdiag.engine.discover.draft import DraftContext, render_draft
from kvdiag.engine.discover.matching import match_roots
from kvdiag.engine.discover.roots import Root
from kvdiag.fileio import write_atomic
from kvdiag.registry.loader import load_registry

_ID = re.compile(r"^D([1-9][0-9]*)$")


def next_number(ids: Iterable[str]) -> int:
    numbers = [int(m.group(1)) for m in (_ID.match(i) for i in ids) if m]
    return max(numbers, default=0) + 1


def folder_ids(folder: Path) -> list[str]:
    return [p.stem for p in folder.glob("D*.md")] if folder.is_dir() else []


def write_drafts(roots: Sequence[Root], folder: Path, *, taken: Iterable[str], context: DraftContext,
                 source_dir: Path | None, drafted: Sequence[Any] = ()) -> tuple[list[tuple[str, Path]], list[str]]:
    """Draft every root of ``roots`` that no entry of ``drafted`` (the folder's own entries) matches.
    Returns (written: (id, path) pairs, kept: one line per root the folder already holds)."""
    pending = [dataclasses.replace(r) for r in roots]
    for r in pending:
        r.known = None
    match_roots(pending, drafted)
    kept = [f"{r.key.label()}: already drafted as {r.known}" for r in pending if r.known]
    number = next_number(list(taken) + folder_ids(folder))
    written: list[tuple[str, Path]] = []
    for root in pending:
        if root.known is not None:
            continue
        entry_id = f"D{number}"
        number += 1
        text = _source_text(source_dir, root.path)
        content = render_draft(root.to_dict(), dataclasses.replace(context, entry_id=entry_id), text)
        path = folder / f"{entry_id}.md"
        write_atomic(path, content)
        written.append((entry_id, path))
        fresh = [r for r in pending if r.known is None and r is not root]
        match_roots(fresh, load_registry(folder).entries)    # the other side of a race is this draft's root
        kept += [f"{r.key.label()}: drafted with {r.known}" for r in fresh if r.known]
    return written, kept


def _source_text(source_dir: Path | None, path: str | None) -> str | None:
    if source_dir is None or not path:
        return None
    try:
        return (Path(source_dir) / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
