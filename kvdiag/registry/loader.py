"""Reading registry files: front matter + Markdown body, and building entries.

Loading never stops at the first bad file: `load_registry` returns the good
entries and the problems of the bad ones, so `kvdiag list` still lists the rest.
"""

from __future__ import annotations

import dataclasses

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag import resources
from kvdiag.errors import DataError, UsageError
from kvdiag.registry.entry import Entry, Matcher, Step
from kvdiag.registry.sections import Applies, DriftSpec, Requires, ScanSpec, from_table
from kvdiag.registry.lint import files_by_id, lint_raw, lint_registry_wide
from kvdiag.registry.raw import Problem, RawEntry, read_raw

ENTRY_GLOB = "D*.md"


@dataclass(frozen=True)
class Registry:
    entries: tuple[Entry, ...]
    problems: tuple[Problem, ...]
    root: Path

    def require_entries(self) -> tuple[Entry, ...]:
        """Every good entry; a DataError when there is none (an empty or wholly broken registry)."""
        if not self.entries:
            what = f"{len(self.problems)} problem(s), see `kvdiag registry lint`" if self.problems else "no D*.md files"
            raise DataError(f"the registry {self.root} has no usable entries ({what})")
        return self.entries

    def get(self, entry_id: str) -> Entry:
        """The entry with this id (case-insensitive), or a UsageError naming the closest ids."""
        wanted = entry_id.strip().upper()
        for entry in self.entries:
            if entry.id.upper() == wanted:
                return entry
        broken = [p for p in self.problems if Path(p.file).stem.upper() == wanted]
        if broken:
            more = f" (and {len(broken) - 1} more problem(s); see `kvdiag registry lint`)" if len(broken) > 1 else ""
            raise DataError(f"{wanted} is malformed: {broken[0]}{more}")
        ids = [e.id for e in self.entries]
        close = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UsageError(f"no defect {entry_id!r} in the registry ({len(ids)} entries: {ids[0]}–{ids[-1]}){hint}"
                         if ids else f"no defect {entry_id!r}: the registry is empty")


def registry_root(explicit: Path | None = None) -> Path:
    """Where entries live: --registry, $KVDIAG_REGISTRY, or kvdiag's own registry (kvdiag.resources)."""
    if explicit is not None:
        return explicit
    env = os.environ.get("KVDIAG_REGISTRY")
    return Path(env) if env else resources.registry_dir()


def build_entry(raw: RawEntry) -> Entry:
    """Build an Entry from linted data (assumes the schema holds)."""
    d = raw.data
    defect = d["defect"]
    return Entry(
        id=defect["id"],
        title=defect["title"],
        summary=defect["summary"],
        owner=defect["owner"],
        status=defect["status"],
        severity=defect["severity"],
        reported=str(defect["reported"]),
        modified=str(defect["modified"]),
        aliases=tuple(defect.get("aliases", ())),
        related=tuple(defect.get("related", ())),
        source=defect.get("source"),
        path=raw.path,
        body=raw.body,
        raw=d,
        references=tuple(d.get("references", ())),
        location=d.get("location", {}),
        affected=tuple(d.get("affected", ())),
        applies=from_table(Applies, d.get("applies")),
        requires=from_table(Requires, d.get("requires")),
        steps=tuple(_build_step(s) for s in d.get("repro", ())),
        signature=tuple(Matcher.from_table(m) for m in d.get("signature", ())),
        scan=from_table(ScanSpec, d["scan"]) if d.get("scan") is not None else None,
        radius=tuple(d.get("radius", ())),
        drift=from_table(DriftSpec, d["drift"]) if d.get("drift") is not None else None,
        probes=tuple(d.get("probes", ())),
    )


def _patterns(value: str | list[str] | None) -> tuple[str, ...]:
    """``expect`` as written: absent, one regex, or an array of regexes."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _build_step(s: dict[str, Any]) -> Step:
    return Step(
        name=s["name"],
        kind=s["kind"],
        description=s["description"],
        timeout=int(s["timeout"]),
        argv=tuple(s.get("argv", ())),
        commands=tuple(tuple(c) for c in s.get("commands", ())),
        default=bool(s.get("default", False)),
        runs=int(s.get("runs", 1)),
        expected_seconds=s.get("expected_seconds"),
        tty=bool(s.get("tty", True)),
        env=dict(s.get("env", {})),
        sanitizer=s.get("sanitizer"),
        sanitizer_options=tuple(s.get("sanitizer_options", ())),
        kernel_filter=s.get("kernel_filter"),
        print_limit=s.get("print_limit"),
        min_cases=int(s.get("min_cases", 1)),
        expect=_patterns(s.get("expect")),
        evidence=tuple(s.get("evidence", ())),
        compare_with=s.get("compare_with"),
        vars=dict(s.get("vars", {})),
        requires_env=tuple(s.get("requires_env", ())),
        requires_binaries=tuple(s["requires_binaries"]) if "requires_binaries" in s else None,
        cmake_defines={str(k): str(v) for k, v in s.get("cmake_defines", {}).items()},
        sources=tuple(s.get("sources", ())),
        exercise_probe=s.get("exercise_probe"),
        cmake_options=tuple(s["cmake_options"]) if "cmake_options" in s else None,
        absent_when_unlisted=s.get("absent_when_unlisted"),
    )


def _refuse_duplicates(root: Path, raws: list[RawEntry]) -> None:
    for entry_id, files in files_by_id(raws).items():
        if len(files) > 1:
            names = [f.name for f in files]
            raise DataError(f"the registry {root} has {len(names)} entries with id {entry_id!r}: "
                            f"{', '.join(names[:-1])} and {names[-1]} (`kvdiag registry lint` lists every problem)")


def entry_files(root: Path) -> list[Path]:
    return sorted(root.glob(ENTRY_GLOB), key=lambda p: (len(p.stem), p.stem))


def load_registry(root: Path | None = None, *, refuse_duplicates: bool = True) -> Registry:
    """Load every entry; bad files become problems, never exceptions.

    One exception: two files that claim one id. Which of them `show D1` or `run D1`
    would mean is a guess, so the registry is refused (a DataError naming the files);
    `registry lint` loads it with ``refuse_duplicates=False`` to list every problem."""
    root = registry_root(root)
    if not root.is_dir():
        raise UsageError(f"registry folder not found: {root}")
    entries: list[Entry] = []
    problems: list[Problem] = []
    raws: list[RawEntry] = []
    for path in entry_files(root):
        try:
            raw = read_raw(path)
        except (OSError, ValueError) as exc:
            problems.append(Problem(path.name, "(file)", str(exc)))
            continue
        raws.append(raw)  # every parsed file counts for ids, even one with problems of its own
        found = lint_raw(raw)
        problems.extend(found)
        if not found:
            entries.append(build_entry(raw))
    if refuse_duplicates:
        _refuse_duplicates(root, raws)
    problems.extend(lint_registry_wide(raws))
    entries.sort(key=lambda e: e.number)
    return Registry(entries=tuple(with_neighbours(entries)), problems=tuple(problems), root=root)


def with_neighbours(entries: list[Entry]) -> list[Entry]:
    """Each entry with the sanitizer signatures of the entries it names as related (Entry.neighbours)."""
    by_id = {e.id: e for e in entries}
    out = []
    for entry in entries:
        found = tuple((rid, tuple(m for m in by_id[rid].signature if m.type == "sanitizer"))
                      for rid in entry.related if rid in by_id)
        found = tuple((rid, ms) for rid, ms in found if ms)
        out.append(dataclasses.replace(entry, neighbours=found) if found else entry)
    return out
