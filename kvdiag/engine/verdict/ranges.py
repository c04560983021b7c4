"""Affected ranges as evidence: an entry's OSV GIT ranges against the tree's HEAD, by git ancestry.

osv-scanner matches a GIT range against a repository's commit graph; kvdiag asks
the same questions of the user's own clone (``kvdiag.workspace.history``):

1. **Which ranges apply.** A range is about one repository's history. The tree
   is identified as a repository by its remote URLs, its root commits (a
   complete clone), or a commit only that repository has (the fork's markers,
   the range's own commits) in its object store. A fork contains upstream's
   history, so upstream llama.cpp's ranges apply to it as well, unless the
   entry records a range in the fork itself: then that range decides there (a
   defect upstream never fixed can be fixed in the fork, and "affected" would
   otherwise win). ggml's commits apply only to a ggml tree (llama.cpp syncs
   ggml under other commit ids).
   A tree identified as a repository the entry records no range for is outside
   them: the registry lists every repository a defect occurs in.
2. **Where HEAD lies**, with OSV's events on a commit graph: HEAD is affected by
   a range when some introduced commit is HEAD or its ancestor ("0" always is)
   and no fixed commit (nor a commit after last_affected) lies between that
   introduction and HEAD; a range with limits covers only ancestors of a limit.
   A commit absent from a complete clone is not an ancestor of HEAD (every
   ancestor of HEAD is there); in a shallow clone an absence, or a "no" from
   git, proves nothing unless HEAD is itself an ancestor of the commit, and the
   answer is unknown, saying so.

The result is a `RangeEvidence` every verdict carries; the judge uses it to tell
"no test case reached the defect" (inconclusive inside an affected range) from
"the defect cannot be here" (not-applicable when the range says fixed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kvdiag.records.ranges import RangeEvidence, RangeFinding
from kvdiag.registry.entry import Entry
from kvdiag.registry.ranges import GitRange
from kvdiag.registry.repos import KNOWN_REPOS, known_repo, repo_label
from kvdiag.workspace.history import TreeHistory

__all__ = ["Identity", "applicable_ranges", "combine_findings", "evaluate_range",
           "identify", "look_up_commits", "range_evidence", "short"]

SHORT = 9


def short(commit: str) -> str:
    return commit if commit in ("0", "*") else commit[:SHORT]


@dataclass(frozen=True)
class Identity:
    """The repositories a tree is (a fork is also the repository it contains), and how each was seen."""

    repos: Mapping[str, str]          # url -> how it was recognised

    def describe(self) -> str:
        return "; ".join(f"{repo_label(url)} ({how})" for url, how in self.repos.items())


def identify(history: TreeHistory, commits: Mapping[str, Iterable[str]] = ()) -> Identity:
    """Which known repositories the tree is: by remote URL, root commit, or a commit only one has
    (``commits``: more such commits per repository url, e.g. the entry's own range commits)."""
    facts = history.facts()
    found: dict[str, str] = {}
    for url in facts.remote_urls:
        repo = known_repo(url)
        if repo is not None:
            found.setdefault(repo.url, f"remote {url}")
    for repo in KNOWN_REPOS.values():
        root = next((r for r in facts.roots if r in repo.roots), None)
        if root is not None:
            found.setdefault(repo.url, f"root commit {short(root)}")
    extra = dict(commits or {})
    for repo in KNOWN_REPOS.values():
        if repo.url in found:
            continue
        marker = next((c for c in (*repo.markers, *extra.get(repo.url, ())) if history.has_commit(c)), None)
        if marker is not None:
            found[repo.url] = f"has commit {short(marker)}"
    for url in list(found):
        for included in KNOWN_REPOS[url].includes:
            found.setdefault(included, f"contains its history, as the {KNOWN_REPOS[url].name}")
    return Identity(found)


def applicable_ranges(ranges: Iterable[GitRange], repos: Iterable[str]) -> list[GitRange]:
    """The ranges of the repositories the tree is, less those of a repository whose history it only
    contains when the entry records a range in the containing one: on a fork, the fork's own range
    decides (the BeeLlama fork fixed a sink read upstream llama.cpp still has)."""
    repos = set(repos)
    own = [r for r in ranges if r.repo in repos]
    contained = {url for r in own for url in KNOWN_REPOS[r.repo].includes}
    return [r for r in own if r.repo not in contained]


class _Ancestry:
    """Three-valued ancestry on one tree (True, False, None = cannot tell), with the reasons for None."""

    def __init__(self, history: TreeHistory):
        self.history = history
        facts = history.facts()
        self.head = facts.head or ""
        self.shallow = facts.shallow
        self.why: list[str] = []

    def _unknown(self, why: str) -> None:
        if why not in self.why:
            self.why.append(why)

    def in_history(self, commit: str) -> bool | None:
        """``commit`` is HEAD or an ancestor of it."""
        if commit == "0":
            return True
        if self.history.has_commit(commit):
            answer = self.history.is_ancestor(commit, self.head)
            if answer is None:
                self._unknown(f"git could not compare {short(commit)} with HEAD")
            elif answer or not self.shallow:
                return answer
            elif self.history.is_ancestor(self.head, commit):
                return False              # a descendant of HEAD: shallow or not, it is not in HEAD's past
            else:
                self._unknown(f"shallow clone: {short(commit)} is here but HEAD's history is cut before "
                              f"git could reach it")
            return None
        if not self.shallow:
            return False                  # a complete clone has every ancestor of HEAD
        self._unknown(f"shallow clone: {short(commit)} is not in the fetched history")
        return None

    def head_before(self, commit: str) -> bool | None:
        """HEAD is a proper ancestor of ``commit`` (a limit)."""
        if commit == self.head:
            return False
        if not self.history.has_commit(commit):
            self._unknown(f"limit {short(commit)} is not in this clone: cannot tell whether HEAD comes before it")
            return None
        answer = self.history.is_ancestor(self.head, commit)
        if answer or (answer is False and not self.shallow):
            return answer
        if answer is False and self.history.is_ancestor(commit, self.head):
            return False
        self._unknown(f"shallow clone: cannot tell whether HEAD comes before limit {short(commit)}")
        return None

    def ordered(self, older: str, newer: str) -> bool | None:
        """``older`` is ``newer`` or its ancestor, for two commits of the range."""
        if older == "0":
            return True
        here_old, here_new = self.history.has_commit(older), self.history.has_commit(newer)
        if here_old and here_new:
            answer = self.history.is_ancestor(older, newer)
            if answer or (answer is False and not self.shallow):
                return answer
        elif here_new and not self.shallow:
            return False
        self._unknown(f"cannot tell whether {short(older)} comes before {short(newer)} in this clone")
        return None


def evaluate_range(rng: GitRange, history: TreeHistory) -> RangeFinding:
    """One range against HEAD (the tree is known to be the range's repository, or to contain it)."""
    anc = _Ancestry(history)
    at = short(anc.head)
    if rng.bounded:
        within = [anc.head_before(limit) for limit in rng.bounded]
        if True not in within:
            if None in within:
                return RangeFinding(rng.repo, "unknown", "; ".join(anc.why))
            return RangeFinding(rng.repo, "unaffected", f"{at} is beyond the range's limit "
                                                        f"{', '.join(short(c) for c in rng.bounded)}")
    closing = [(c, "fixed", anc.in_history(c)) for c in rng.fixed]
    for commit in rng.last_affected:          # HEAD after its last affected commit; HEAD itself still has it
        here = anc.in_history(commit)
        closing.append((commit, "last_affected", None if here is None else here and commit != anc.head))
    opened, closed, unsure = [], [], False
    for intro in rng.introduced:
        here = anc.in_history(intro)
        if here is None:
            unsure = True
            continue
        if not here:
            continue
        shut, undecided = None, False
        for commit, kind, passed in closing:
            after = True if len(rng.introduced) == 1 else anc.ordered(intro, commit)
            if passed and after:
                shut = (commit, kind)
                break
            undecided = undecided or passed is None or (passed and after is None)
        if shut is not None:
            closed.append(shut)
        elif undecided:
            unsure = True
        else:
            opened.append(intro)
    if opened:
        return RangeFinding(rng.repo, "affected", _affected_detail(rng, opened[0], anc))
    if unsure:
        return RangeFinding(rng.repo, "unknown", "; ".join(anc.why) or "git could not place HEAD")
    if closed:
        commit, kind = closed[0]
        if kind == "fixed":
            return RangeFinding(rng.repo, "fixed", f"{short(commit)} is an ancestor of {at}")
        return RangeFinding(rng.repo, "fixed", f"{at} comes after last_affected {short(commit)}")
    firsts = ", ".join(short(c) for c in rng.introduced)
    return RangeFinding(rng.repo, "unaffected", f"introduced {firsts} is not an ancestor of {at}")


def _affected_detail(rng: GitRange, intro: str, anc: _Ancestry) -> str:
    """Why HEAD is inside: the open introduction, and where each closing event stands (answers git gave)."""
    at = short(anc.head)
    parts = ["introduced 0" if intro == "0" else f"introduced {short(intro)} is an ancestor of {at}"]
    for key, commits in (("fixed", rng.fixed), ("last_affected", rng.last_affected)):
        for commit in commits:
            if anc.in_history(commit) and commit != anc.head:
                parts.append(f"{key} {short(commit)} comes before {short(intro)}")   # it closed an earlier one
            elif key == "fixed":
                parts.append(f"fixed {short(commit)} not an ancestor of {at}")
            else:
                parts.append(f"last_affected {short(commit)} not before {at}")
    if not rng.fixed and not rng.last_affected:
        parts.append("no fix recorded" + (f" (HEAD {at})" if intro == "0" else ""))
    return ", ".join(parts)


_ORDER = ("affected", "unknown", "fixed", "unaffected")


def combine_findings(findings: tuple[RangeFinding, ...]) -> tuple[str, str, tuple[RangeFinding, ...]]:
    """One status for several ranges (affected wins, then unknown, fixed, unaffected) and its detail."""
    status = next(s for s in _ORDER if any(f.status == s for f in findings))
    deciding = [f for f in findings if f.status == status]
    several = len({f.repo for f in findings}) > 1
    detail = "; ".join(f"{repo_label(f.repo)}: {f.detail}" if several else f.detail for f in deciding)
    return status, detail, findings


def look_up_commits(history: TreeHistory | None, entries: Iterable[Entry]) -> None:
    """Which commits of these entries' ranges (and the repositories' markers) the tree holds, asked of
    git in one process: a run or a sweep asks this once for all its entries."""
    if history is not None:
        history.look_up([c for e in entries for r in e.ranges for c in r.commits()]
                        + [m for repo in KNOWN_REPOS.values() for m in repo.markers])


def range_evidence(entry: Entry, history: TreeHistory | None, *, dirty: bool = False) -> RangeEvidence:
    """The entry's ranges against the tree (memoised per history: a sweep asks once per entry)."""
    if history is None:
        return _evidence(entry, None, dirty)
    key = f"range:{entry.id}:{dirty}"
    if key not in history.memo:
        history.memo[key] = _evidence(entry, history, dirty)
    return history.memo[key]          # type: ignore[return-value]


def _evidence(entry: Entry, history: TreeHistory | None, dirty: bool) -> RangeEvidence:
    ranges = entry.ranges
    if not ranges:
        return RangeEvidence("none", "the entry names no affected range: a build or toolchain defect, not a "
                                     "commit of a repository")
    if history is None:
        return RangeEvidence("unknown", "no source tree was inspected")
    facts = history.facts()
    if facts.head is None:
        return RangeEvidence("unknown", facts.why_none or "no git history")
    notes = ("the tree has uncommitted changes: the range judges HEAD, not the changes",) if dirty else ()
    look_up_commits(history, [entry])
    identity = identify(history, {r.repo: r.commits() for r in ranges})
    if not identity.repos:
        names = ", ".join(r.name for r in KNOWN_REPOS.values())
        how = "shallow clone, no remote URL or commit" if facts.shallow else "no remote URL, root commit or commit"
        return RangeEvidence("unknown", f"repository not identified ({how} of {names} here)", facts.head,
                             notes=notes)
    applicable = applicable_ranges(ranges, identity.repos)
    if not applicable:
        named = ", ".join(dict.fromkeys(repo_label(r.repo) for r in ranges))
        return RangeEvidence("unaffected", f"this tree is {', '.join(repo_label(u) for u in identity.repos)}; the "
                                           f"entry records the defect only in {named}", facts.head,
                             identity.describe(), notes=notes)
    status, detail, findings = combine_findings(tuple(evaluate_range(r, history) for r in applicable))
    return RangeEvidence(status, detail, facts.head, identity.describe(), findings, notes,
                         placement="git", placed=f"git commit {short(facts.head)}"
                                                 + (" (shallow clone)" if facts.shallow else ""))
