"""Where a tree without a usable git history lies, and what an entry's ranges say there.

git decides a range when the tree is a clone with the commits (``kvdiag.engine.verdict.ranges``).
A release tarball has no ``.git``; a shallow clone lacks the ancestry. Such a tree
is placed instead, each way tried in turn, the first that places it deciding:

1. ``history``: in a clone or mirror the user names (``--history REPO``): the
   tree's HEAD commit if the history has it, else the commits whose named files
   hold the tree's blobs (git answers the range's questions there);
2. ``index``: the same by blobs, in the timeline kvdiag ships for ggml
   (``kvdiag/data/ggml-blobs.json``), ordered by first-parent position;
3. ``stamp``: by ggml's version stamp, the commits that carried that version
   (a llama.cpp tree's ggml/ may run ahead of ggml's own, so only from the
   stamp's first commit on).

A placement is a set of candidate commits (the ends of the spans where every file
fits). The entry's ranges for the placement's repository are evaluated at each end:
when all ends agree, that is the answer; otherwise it is unknown and says between
which commits the range's event falls. Content placement says what the files
are, not which repository the tree is: a range of another repository (a fork that
could hold the same files) stays unknown, and an entry whose own files do not fit
is not placed by the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from kvdiag.engine.verdict.ranges import (Identity, applicable_ranges, combine_findings, evaluate_range, identify,
                                          range_evidence, short)
from kvdiag.records.ranges import RangeEvidence
from kvdiag.registry.entry import Entry
from kvdiag.registry.repos import GGML, repo_label
from kvdiag.resources import PACKAGE_DIR
from kvdiag.workspace.placement.blob_timeline import Span, Timeline, timeline_from_git
from kvdiag.workspace.placement.blobs import ggml_key, is_ggml_tree, read_version_stamp, tree_blobs
from kvdiag.workspace.placement.placed_history import LineHistory, PlacedHistory

__all__ = ["Placement", "SHIPPED_INDEX", "named_files", "place_tree", "placed_evidence", "shipped_timeline",
           "tree_range_evidence"]

SHIPPED_INDEX = PACKAGE_DIR / "data" / "ggml-blobs.json"


def named_files(entries: Iterable[Entry]) -> list[str]:
    """Every file the entries name (``[location] files`` and each site's file), as ggml writes it."""
    keys = set()
    for entry in entries:
        location = entry.location or {}
        keys.update(ggml_key(str(f)) for f in location.get("files") or ())
        keys.update(ggml_key(str(s.get("file"))) for s in location.get("sites") or () if s.get("file"))
    return sorted(keys)


def shipped_timeline() -> Timeline | None:
    try:
        return Timeline.load(SHIPPED_INDEX)
    except (OSError, ValueError, KeyError):
        return None


@dataclass(frozen=True)
class Placement:
    """Where the tree was placed: how, in which repository, at which candidate commits."""

    method: str                            # history | index | stamp
    repos: Identity                        # the repositories the placed commits belong to
    ends: tuple[str, ...]                  # the commits to judge at (each span's first and last)
    words: str                             # "blob match of 3 files against ggml history at d99724f2: ..."
    history_at: Callable[[str], Any]       # commit -> a history judged as if that commit were HEAD
    blobs: Mapping[str, str] = field(default_factory=dict)     # the tree's blobs of the named files
    unfit: Mapping[str, str] = field(default_factory=dict)     # named files that fit nothing here, and why
    exact: bool = False                    # the tree's own HEAD commit, not a span
    is_repo: bool = False                  # the tree is that repository itself (ggml's own layout), not a
                                           # tree that carries its files (llama.cpp, a fork: ggml/ inside)


def place_tree(history, entries: Iterable[Entry]) -> tuple[list[Placement], list[str]]:
    """Every way this tree could be placed (best first), and why each other way did not place it. The
    files are those the shipped index tracks (every file the registry names) and the entries' own:
    more files place the tree more tightly. Memoised per tree: a sweep places it once."""
    key = "placements"
    if key in history.memo:
        return history.memo[key]          # type: ignore[return-value]
    source = history.source_dir
    why: list[str] = []
    placements: list[Placement] = []
    if source is None or not Path(source).is_dir():
        history.memo[key] = ([], ["no source tree to place"])
        return history.memo[key]
    timeline = shipped_timeline()
    keys = sorted(set(named_files(entries)) | set(timeline.files if timeline is not None else ()))
    blobs = tree_blobs(Path(source), keys)
    head = history.facts().head
    reference = getattr(history, "reference", None)
    if reference is not None:
        found = _by_reference(Path(reference), head, blobs, keys, history.log_dir, why, is_ggml_tree(Path(source)))
        placements += [found] if found is not None else []
    if timeline is None:
        why.append(f"the shipped index {SHIPPED_INDEX.name} is not readable")
    else:
        is_ggml = timeline.repo == GGML and is_ggml_tree(Path(source))
        found = _by_timeline(timeline, head, blobs, why, is_ggml)
        placements += [found] if found is not None else []
        stamp = _by_stamp(timeline, Path(source), blobs, why)
        placements += [stamp] if stamp is not None else []
    history.memo[key] = (placements, why)
    return placements, why


def _by_reference(reference: Path, head: str | None, blobs: Mapping[str, str], keys: list[str], log_dir: Path,
                  why: list[str], ggml_layout: bool) -> Placement | None:
    def at(commit: str) -> PlacedHistory:
        return PlacedHistory(reference, commit, log_dir)

    probe = PlacedHistory(reference, head or "HEAD", log_dir)
    if probe.facts().head is None:
        why.append(f"--history {reference}: {probe.facts().why_none}")
        return None
    repos = identify(probe)
    is_repo = ggml_layout and set(repos.repos) == {GGML}
    if head is not None and probe.has_commit(head):
        return Placement("history", repos, (head,), f"git commit {short(head)} found in history {reference}", at,
                         exact=True, is_repo=is_repo)
    try:
        timeline = timeline_from_git(reference, keys, log_dir=log_dir, repo_url=next(iter(repos.repos), str(reference)))
    except OSError as exc:
        why.append(f"--history {reference}: {exc}")
        return None
    return _fit(timeline, "history", repos, blobs, at, why, f"history {reference}", is_repo)


def _by_timeline(timeline: Timeline, head: str | None, blobs: Mapping[str, str], why: list[str],
                 is_repo: bool) -> Placement | None:
    repos = Identity({timeline.repo: f"shipped index ({timeline.source})"})

    def at(commit: str) -> LineHistory:
        return LineHistory(timeline, commit)

    if head is not None and timeline.position(head) is not None:
        return Placement("index", repos, (head,), f"git commit {short(head)} found in the shipped index "
                                                  f"({timeline.source})", at, exact=True, is_repo=is_repo)
    return _fit(timeline, "index", repos, blobs, at, why, f"the shipped index ({timeline.source})", is_repo)


def _fit(timeline: Timeline, method: str, repos: Identity, blobs: Mapping[str, str], at: Callable[[str], Any],
         why: list[str], where: str, is_repo: bool = False) -> Placement | None:
    spans, unfit = timeline.fit(blobs)
    matched = [k for k in blobs if k in timeline.files and k not in unfit]
    if not spans:
        why.append(f"{where}: " + ("; ".join(unfit.values()) if unfit else
                                   "none of the named files is here" if not matched else
                                   "no commit held these files together"))
        return None
    ends = _ends(timeline, spans)
    first, last = min(s.lo for s in spans), max(timeline.head if s.hi is None else s.hi for s in spans)
    words = (f"blob match of {len(matched)} file(s) ({', '.join(sorted(matched))}) against {where}: "
             f"{_between(timeline, first, last)}")
    return Placement(method, repos, ends, words, at, blobs=dict(blobs), unfit=unfit, is_repo=is_repo)


def _by_stamp(timeline: Timeline, source: Path, blobs: Mapping[str, str], why: list[str]) -> Placement | None:
    stamp = read_version_stamp(source)
    if stamp.ggml is None:
        why.append(f"version stamp: {stamp.describe()}")
        return None
    spans = timeline.version_span(stamp.ggml)
    if not spans:
        why.append(f"version stamp: GGML_VERSION {stamp.ggml} is not one {timeline.source} knows")
        return None
    vendored = stamp.ggml_file == "ggml/CMakeLists.txt"
    if vendored:                        # llama.cpp carries ggml's changes before ggml syncs and stamps them
        spans = [Span(min(s.lo for s in spans), None)]
    first = min(s.lo for s in spans)
    last = max(timeline.head if s.hi is None else s.hi for s in spans)
    open_end = any(s.hi is None for s in spans)
    words = (f"version stamp {stamp.describe()}: {_between(timeline, first, last)}"
             + (", or later" if open_end else ""))
    repos = Identity({timeline.repo: f"version stamp ({timeline.source})"})
    # A stamp dates the tree's ggml, not each file: a file that matches no version of it in ggml's
    # history holds a change of the tree's own (a fork's fix, llama.cpp ahead of a sync), and the
    # stamp cannot speak for an entry whose own file that is (placed_evidence then says so).
    _, unfit = timeline.fit(blobs)
    return Placement("stamp", repos, _ends(timeline, spans), words, lambda c: LineHistory(timeline, c),
                     blobs=dict(blobs), unfit=unfit, is_repo=not vendored and timeline.repo == GGML)


def _ends(timeline: Timeline, spans: list[Span]) -> tuple[str, ...]:
    positions = sorted({p for s in spans for p in (s.lo, timeline.head if s.hi is None else s.hi)})
    return tuple(c for c in (timeline.commit_at(p) for p in positions) if c)


def _between(timeline: Timeline, first: int, last: int) -> str:
    if first == last:
        return timeline.label(first)
    return f"{timeline.label(first)} .. {timeline.label(last)} ({last - first + 1} commits)"


# ---------------------------------------------------------------------- judging an entry there

def tree_range_evidence(entry: Entry, history, *, dirty: bool = False) -> RangeEvidence:
    """What every verdict carries: git's answer (kvdiag.engine.verdict.ranges), and where git cannot place the
    tree (no .git, a shallow clone, an unidentified repository), the placement's (memoised per tree)."""
    evidence = range_evidence(entry, history, dirty=dirty)
    source = getattr(history, "source_dir", None)
    if evidence.status != "unknown" or source is None or not Path(source).is_dir():
        return evidence
    key = f"placed-range:{entry.id}"
    if key not in history.memo:
        history.memo[key] = placed_evidence(entry, history, evidence)
    return history.memo[key]          # type: ignore[return-value]


def placed_evidence(entry: Entry, history, unplaced: RangeEvidence) -> RangeEvidence:
    """The entry's range evidence from the first placement that decides it; ``unplaced`` (saying why
    each way failed) when none does."""
    placements, why = place_tree(history, [entry])
    reasons = list(why)
    for placement in placements:
        evidence, reason = _judge(entry, placement)
        if evidence is not None:
            return evidence
        reasons.append(reason)
    detail = f"{unplaced.detail}; not placed otherwise: " + "; ".join(reasons) if reasons else unplaced.detail
    return RangeEvidence(unplaced.status, detail, unplaced.head, unplaced.tree, unplaced.findings, unplaced.notes,
                         placement="unplaced", placed="unplaced: " + ("; ".join(reasons) or unplaced.detail))


def _judge(entry: Entry, placement: Placement) -> tuple[RangeEvidence | None, str]:
    own = [k for k in named_files([entry]) if k in placement.unfit]
    if own:
        return None, f"{placement.method}: the entry's own file does not fit: {placement.unfit[own[0]]}"
    ranges = applicable_ranges(entry.ranges, placement.repos.repos)
    if not ranges:
        named = ", ".join(dict.fromkeys(repo_label(r.repo) for r in entry.ranges))
        if placement.is_repo:
            return RangeEvidence("unaffected", f"this tree is {placement.repos.describe()}; the entry records the "
                                               f"defect only in {named}", None, placement.repos.describe(),
                                 placement=placement.method, placed=placement.words), ""
        return None, (f"{placement.method}: placed in {placement.repos.describe()}, but the entry records ranges "
                      f"only for {named}")
    at = [placement.history_at(commit) for commit in placement.ends]
    missing = sorted({c for h in at if isinstance(h, LineHistory) for c in h.knows(
        [c for r in ranges for c in r.commits()])})
    if missing:
        return None, (f"{placement.method}: the shipped index does not name {', '.join(short(c) for c in missing)} "
                      f"(regenerate it: tests/fixtures/ranges/blob_index.py)")
    per_end = [combine_findings(tuple(evaluate_range(r, h) for r in ranges)) for h in at]
    statuses = {status for status, _, _ in per_end}
    if len(statuses) != 1 or "unknown" in statuses:
        ends = ", ".join(f"{short(c)}: {s}" for c, (s, _, _) in zip(placement.ends, per_end))
        return None, f"{placement.method}: {placement.words}; the range differs across them ({ends})"
    status, detail, findings = per_end[0]
    if len(placement.ends) > 1:
        detail = f"{detail} (the same at each of {', '.join(short(c) for c in placement.ends)})"
    notes = tuple(f"not placed by {k}: {v}" for k, v in placement.unfit.items())
    return RangeEvidence(status, detail, placement.ends[0] if placement.exact else None,
                         placement.repos.describe(), findings, notes, placement=placement.method,
                         placed=placement.words), ""
