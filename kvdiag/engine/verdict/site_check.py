"""After a confirmation: is the site the detector printed the registry's site for this tree?

The sanitizer names a `file:line` (D2's barrier), an abort names one (D1's
`fattn.cu:380: fatal error`). The registry's site for the same file is placed in
the build's own source by its context (`target.sites`), or, where that source
cannot be read, by the line recorded for the build's commit. When the two differ,
either the registry's context leads to the wrong construct in this tree or the
detector fired somewhere else: the verdict keeps its confirmation and carries a
note saying which lines disagree. The placement is kept in the outcome
(``extra["site"]``) so a report names the site in this tree's layout and line; a run that
confirmed nothing keeps the placement by context alone (:func:`place_in_tree`), the one
`kvdiag registry verify` makes, so the report and verify never disagree on where it is.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Sequence

from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.registry.entry import Entry
from kvdiag.workspace import sites
from kvdiag.workspace.sites import SiteSpec
from kvdiag.workspace.tree import Tree


def printed_sites(attempts: Sequence[Attempt]) -> list[tuple[str, int]]:
    """``(file name, line)`` of every site and abort the confirmed attempts printed, in order."""
    out: list[tuple[str, int]] = []
    for attempt in attempts:
        if attempt.verdict is not Verdict.CONFIRMED:
            continue
        for found in (*attempt.evidence.sites, *attempt.evidence.aborts):
            if found.get("file") and isinstance(found.get("line"), int):
                out.append((PurePosixPath(str(found["file"]).replace("\\", "/")).name, found["line"]))
    return list(dict.fromkeys(out))


def check_site(entry: Entry, tree: Tree, attempts: Sequence[Attempt]) -> tuple[dict[str, Any] | None, str | None]:
    """The placement record for the outcome and, when the lines disagree or the registry's site is
    not in this tree, a note for the verdict. ``(None, None)`` when no printed file has a site."""
    specs = [SiteSpec.from_table(t) for t in (entry.location or {}).get("sites", ())]
    printed = printed_sites(attempts)
    names = {name for name, _ in printed}
    specs = [s for s in specs if PurePosixPath(s.file).name in names]
    if not specs:
        return None, None
    placements = [tree.place(s) for s in specs]
    lines = {(PurePosixPath(p.file).name, p.line) for p in placements if p.line is not None}
    shown = [f"{name}:{line}" for name, line in printed if name in {PurePosixPath(s.file).name for s in specs}]
    record = {"printed": shown, "registry": [_placed(s, p) for s, p in zip(specs, placements)],
              "agrees": None}
    if not lines:
        unplaced = all(p.state == sites.UNPLACED for p in placements)
        if not unplaced:
            record["agrees"] = False
        return record, None if unplaced else (
            f"the detector printed {', '.join(shown)}, but the registry's site is not placed in this tree: "
            + "; ".join(f"{s.describe()}: {p.detail}" for s, p in zip(specs, placements)))
    record["agrees"] = any((name, line) in lines for name, line in printed)
    if record["agrees"]:
        return record, None
    where = ", ".join(f"{p.at} ({p.how})" for p in placements if p.line is not None)
    return record, (f"the detector printed {', '.join(shown)}, not the registry's site for this tree: {where}; "
                    "the registry's context or the detector's site is out of date for this tree")


def _placed(spec: SiteSpec, placement: sites.Placement) -> dict[str, Any]:
    return {"file": placement.file, "line": placement.line, "state": placement.state, "how": placement.how,
            "finds": spec.describe(), "detail": placement.detail}


def place_in_tree(entry: Entry, tree: Tree) -> dict[str, Any] | None:
    """Where the registry's sites are in this tree, by their context, as `kvdiag registry verify` places
    them: the record a run keeps when nothing was confirmed (nothing printed a site to compare), so that
    the report names the site in this tree whatever the verdict. None when the entry has no sites."""
    specs = [SiteSpec.from_table(t) for t in (entry.location or {}).get("sites", ())]
    if not specs:
        return None
    return {"printed": [], "registry": [_placed(s, tree.place(s)) for s in specs], "agrees": None}


def site_notes(entry: Entry, target, attempts: Sequence[Attempt], verdict: Verdict, *,
               scan_case: bool = False) -> tuple[list[str], dict[str, Any] | None]:
    """The notes and the site record of an outcome on ``target`` (engine.verdict.target.Target): a
    confirmation's (compared with what the detector printed), else the site placed by its context alone
    (:func:`place_in_tree`), as `registry verify` places it; nothing for a scan's case (the scan places
    nothing per case)."""
    if verdict is Verdict.CONFIRMED:
        return confirmed_notes(entry, target, attempts)
    if scan_case:
        return [], None
    return [], place_in_tree(entry, Tree.from_build_info(target.build) if target.build is not None else Tree(None))


def confirmed_notes(entry: Entry, target, attempts: Sequence[Attempt]) -> tuple[list[str], dict[str, Any] | None]:
    """A confirmation's notes: sites printed without file:line, and whether the printed site is the
    registry's site for this tree (its placement is returned for the outcome)."""
    notes = []
    if any(a.evidence.sites and all(s.get("file") is None for s in a.evidence.sites) for a in attempts):
        notes.append("sites lack file:line (no -lineinfo): confirmed on kind and kernel only")
    tree = Tree.from_build_info(target.build) if target.build is not None else Tree(None)
    site, note = check_site(entry, tree, attempts)
    return notes + ([note] if note else []), site
