"""`kvdiag registry verify`: every fact an entry names about a tree, checked against one.

An entry names files, tests, CMake options, binaries, functions and sites (found
again by their context, `target.sites`) of the tree it was written against. A fact nobody checked against a fork is how a
false not-applicable ships (a test re-languaged from .cpp to .py, registered with
CTest under the same name, declared absent). This module asks `target.tree` for
each fact and reports every mismatch by entry and key, like the linter.

An entry whose fork-detection facts (`applies.source_paths`, `tests`,
`cmake_options`, `server_flags`) are all absent, with nothing close in their
place, is about another tree: its facts are not held against this one. A
detection fact that is absent while something close is present (the same name in
another language, a CTest test of that name) is a mismatch, never "not this tree".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kvdiag.registry.entry import Entry
from kvdiag.registry.raw import Problem as Mismatch   # file: key: message, as the linter prints
from kvdiag.workspace import sites
from kvdiag.workspace.sites import Placement, SiteSpec
from kvdiag.workspace.tree import ABSENT, FOUND, UNKNOWN, Answer, Tree

_CTEST_NAME = re.compile(r"^\^?([A-Za-z0-9_.+-]+)\$?$")


@dataclass
class EntryFacts:
    """What one entry's facts came to on this tree."""

    entry_id: str
    file: str
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)       # "key: why it could not be checked"
    other_tree: str | None = None                           # why the entry is about another tree
    outside: list[str] = field(default_factory=list)        # "key: detail" of code facts absent outside the range
    sites: list["SitePlace"] = field(default_factory=list)  # where each site is in this tree
    states: dict[str, str] = field(default_factory=dict)    # every fact asked: key -> found | absent | unknown

    def to_dict(self) -> dict:
        return {"entry": self.entry_id, "checked": self.checked, "other_tree": self.other_tree,
                "facts": dict(self.states),
                "mismatches": [{"key": m.key, "message": m.message} for m in self.mismatches],
                "unknown": list(self.unknown), "outside": list(self.outside),
                "sites": [s.to_dict() for s in self.sites]}


def detection_facts(entry: Entry, tree: Tree) -> list[tuple[str, Answer]]:
    """The facts that say whether a tree has the entry's feature at all (fork detection)."""
    applies = entry.applies
    out: list[tuple[str, Answer]] = []
    for i, rel in enumerate(applies.source_paths):
        out.append((f"applies.source_paths[{i}]", tree.file(rel)))
    for i, name in enumerate(applies.tests):
        out.append((f"applies.tests[{i}]", tree.test(name)))
    for i, option in enumerate(applies.cmake_options):
        out.append((f"applies.cmake_options[{i}]", tree.option(option)))
    for i, flag in enumerate(applies.server_flags):
        out.append((f"applies.server_flags[{i}]", tree.text(flag)))
    return out


def _other_facts(entry: Entry, tree: Tree, report: "EntryFacts") -> Iterable[tuple[str, Answer]]:
    location = entry.location
    files = tuple(location.get("files", ()))
    for i, rel in enumerate(files):
        yield f"location.files[{i}]", tree.file(rel)
    for i, name in enumerate(location.get("functions", ())):
        yield f"location.functions[{i}]", tree.function(name, files)
    yield from _site_facts(entry, tree, report)
    for option in entry.applies.cmake_values:
        yield f"applies.cmake_values.{option}", tree.option(option)
    for i, name in enumerate(entry.requires.binaries):
        yield f"requires.binaries[{i}]", tree.binary(name)
    for s, step in enumerate(entry.steps):
        for name in ctest_names(step.command_templates):
            yield f"repro[{s}].argv", tree.test(name)
    for i, matcher in enumerate(entry.signature):
        name = site_file_name(matcher.site)
        if name:
            yield f"signature[{i}].site", _file_named(tree, name)


def site_specs(entry: Entry) -> list[SiteSpec]:
    """The entry's `location.sites`, read."""
    return [SiteSpec.from_table(t) for t in (entry.location or {}).get("sites", ())]


def _site_facts(entry: Entry, tree: Tree, report: "EntryFacts") -> Iterable[tuple[str, Answer]]:
    """Each site placed in this tree by its context (never by the nearest line number): found at
    one line (kept in ``report.sites``), or ambiguous, not found, or in conflict with the line
    recorded for this commit, which are mismatches."""
    for i, spec in enumerate(site_specs(entry)):
        key = f"location.sites[{i}]"
        placement = tree.place(spec)
        if placement.state == sites.UNPLACED:
            yield key, Answer(UNKNOWN, placement.detail)
            continue
        report.sites.append(SitePlace(key, spec, placement))
        if placement.state == sites.FOUND:
            yield key, Answer(FOUND, f"{placement.at} ({placement.how})")
            continue
        recorded = f" (recorded: {spec.recorded()})" if spec.at and placement.state != sites.CONFLICT else ""
        where = placement.file or spec.file      # as this tree names it (either layout), when it has the file
        yield key, Answer(ABSENT, f"{where}: {spec.describe()}: {placement.detail}{recorded}")


@dataclass(frozen=True)
class SitePlace:
    """Where one site of the entry is in this tree."""

    key: str
    spec: SiteSpec
    placement: Placement

    @property
    def unrecorded(self) -> bool:
        """Found, at a line no record of this tree's commit names: what a reader wants told."""
        return self.placement.state == sites.FOUND and self.placement.recorded is None

    def describe(self) -> str:
        p = self.placement
        seen = f"; recorded: {self.spec.recorded()}" if self.spec.at else ""
        return f"at {p.at}, found {p.how} ({self.spec.describe()}{seen})"

    def to_dict(self) -> dict:
        p = self.placement
        return {"key": self.key, "state": p.state, "file": p.file, "line": p.line, "how": p.how,
                "recorded_line": p.recorded, "detail": p.detail}


def ctest_names(commands) -> list[str]:
    """Test names a `ctest … -R ^name$` command selects exactly."""
    out = []
    for argv in commands:
        if not argv or Path(str(argv[0])).name != "ctest":
            continue
        for flag, value in zip(argv, argv[1:]):
            m = _CTEST_NAME.match(value) if flag in ("-R", "--tests-regex") else None
            if m:
                out.append(m.group(1))
    return out


def site_file_name(pattern: str | None) -> str | None:
    """The file a signature's site regex names ('fattn-mma-f16\\.cuh:\\d+' -> 'fattn-mma-f16.cuh')."""
    if not pattern:
        return None
    head = pattern.split(":", 1)[0]
    name = head.replace("\\.", ".").lstrip("^")
    return name if re.fullmatch(r"[A-Za-z0-9_.-]+\.[A-Za-z]+", name) else None


def _file_named(tree: Tree, name: str) -> Answer:
    if tree.source is None:
        return Answer(UNKNOWN, "no source tree given")
    for path in tree._code_files:
        if path.name == name:
            return Answer(FOUND, str(path.relative_to(tree.source)))
    return Answer(ABSENT, f"no file named {name} in the tree's code")


def verify_entry(entry: Entry, tree: Tree, outside_range: str | None = None) -> EntryFacts:
    """Every fact of one entry against the tree. ``outside_range``: why the entry's affected ranges
    place this tree before the defect's code came or after its fix took it away; the code facts
    (``location.*``) it lacks are then what the range says, not mismatches."""
    report = EntryFacts(entry.id, entry.path.name)
    detection = detection_facts(entry, tree)
    checked = [(k, a) for k, a in detection if a.state != UNKNOWN]
    if checked and all(a.state == ABSENT and not a.instead for _, a in checked):
        report.other_tree = "; ".join(f"{k}: {a.detail}" for k, a in checked)
        report.checked = len(checked)
        report.states = {k: a.state for k, a in checked}
        return report
    for key, answer in [*detection, *_other_facts(entry, tree, report)]:
        report.states[key] = answer.state
        if answer.state == UNKNOWN:
            report.unknown.append(f"{key}: {answer.detail}")
            continue
        report.checked += 1
        if answer.state == ABSENT and outside_range is not None and key.startswith("location."):
            report.outside.append(f"{key}: {answer.detail}")
            continue
        if answer.state == ABSENT:
            instead = f"; the tree has {', '.join(answer.instead)}" if answer.instead else ""
            report.mismatches.append(Mismatch(entry.path.name, key, answer.detail + instead))
    return report


def verify_entries(entries: Iterable[Entry], tree: Tree,
                   outside_range: dict[str, str] | None = None) -> list[EntryFacts]:
    """Each entry's facts; ``outside_range`` maps an entry id to why its ranges place the tree outside."""
    outside_range = outside_range or {}
    return [verify_entry(entry, tree, outside_range.get(entry.id)) for entry in entries]
