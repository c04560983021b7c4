"""`kvdiag registry verify`: every fact an entry names about a tree, checked against one.

An entry names files, tests, CMake options, binaries, functions and line sites of
the tree it was written against. A fact nobody checked against a fork is how a
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
from kvdiag.target.tree import ABSENT, FOUND, UNKNOWN, Answer, Tree

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

    def to_dict(self) -> dict:
        return {"entry": self.entry_id, "checked": self.checked, "other_tree": self.other_tree,
                "mismatches": [{"key": m.key, "message": m.message} for m in self.mismatches],
                "unknown": list(self.unknown)}


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


def _other_facts(entry: Entry, tree: Tree) -> Iterable[tuple[str, Answer]]:
    location = entry.location
    files = tuple(location.get("files", ()))
    for i, rel in enumerate(files):
        yield f"location.files[{i}]", tree.file(rel)
    for i, name in enumerate(location.get("functions", ())):
        yield f"location.functions[{i}]", tree.function(name, files)
    yield from _site_facts(location.get("sites", ()), tree)
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


def _site_facts(sites, tree: Tree) -> Iterable[tuple[str, Answer]]:
    """A file's sites, grouped by the commit they were recorded at: the group of the tree's own commit
    must hold; with the commit unknown (a plain folder) or not recorded, some group must hold in full.
    Otherwise every failing site is reported with where its text is now."""
    by_file: dict[str, dict[str, list[tuple[int, dict]]]] = {}
    for i, site in enumerate(sites):
        by_file.setdefault(site["file"], {}).setdefault(site.get("commit", ""), []).append((i, site))
    for rel, groups in by_file.items():
        mine = [c for c in groups if tree.commit and c and (tree.commit.startswith(c) or c.startswith(tree.commit))]
        judged = {c: [(i, s, tree.site(rel, s["line"], s["holds"])) for i, s in groups[c]] for c in (mine or groups)}
        if all(a.state == UNKNOWN for rows in judged.values() for _, _, a in rows):
            yield f"location.sites[{next(iter(judged.values()))[0][0]}]", next(iter(judged.values()))[0][2]
            continue
        holding = next((rows for rows in judged.values() if all(a.found for _, _, a in rows)), None)
        if holding is not None:
            for i, _, answer in holding:
                yield f"location.sites[{i}]", answer
            continue
        for rows in judged.values():
            for i, site, answer in rows:
                if not answer.found:
                    at = f" (recorded at {site['commit']})" if site.get("commit") else ""
                    yield f"location.sites[{i}]", Answer(ABSENT, answer.detail + at, answer.instead)


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


def verify_entry(entry: Entry, tree: Tree) -> EntryFacts:
    report = EntryFacts(entry.id, entry.path.name)
    detection = detection_facts(entry, tree)
    checked = [(k, a) for k, a in detection if a.state != UNKNOWN]
    if checked and all(a.state == ABSENT and not a.instead for _, a in checked):
        report.other_tree = "; ".join(f"{k}: {a.detail}" for k, a in checked)
        report.checked = len(checked)
        return report
    for key, answer in [*detection, *_other_facts(entry, tree)]:
        if answer.state == UNKNOWN:
            report.unknown.append(f"{key}: {answer.detail}")
            continue
        report.checked += 1
        if answer.state == ABSENT:
            instead = f"; the tree has {', '.join(answer.instead)}" if answer.instead else ""
            report.mismatches.append(Mismatch(entry.path.name, key, answer.detail + instead))
    return report


def verify_entries(entries: Iterable[Entry], tree: Tree) -> list[EntryFacts]:
    return [verify_entry(entry, tree) for entry in entries]
