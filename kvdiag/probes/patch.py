"""Probe files: a header of ``key: value`` lines, a line ``---``, then a git diff.

A probe is a patch kvdiag applies to a scratch copy of the user's source, never
to their working tree: an *instrument* makes a defect visible (a device printf),
a *fix* is a candidate repair that ``kvdiag verify`` judges. ``git apply``
skips everything before the first ``diff --git`` line, so the header travels
inside the patch file without a second file to keep in step.

Header keys (all required, one per line; an indented line continues the value
of the key above it)::

    kvdiag-probe:   the probe's name (the file's name without .patch)
    defect:         the registry id it belongs to (D2)
    kind:           instrument | fix
    repository:     the repository the diff was written against
    commit:         the commit it was verified to apply to
    path-prefix:    where its files live in that repository; free text may follow
    output-correct: whether results stay correct with it applied; free text
    requires:       names of probes that must be applied first, or "none"
    summary:        what it does and why

Loading never stops at the first bad file: :func:`load_probes` returns the good
probes and every problem of the bad ones, as ``file: key: message``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from kvdiag import resources
from kvdiag.errors import ProbeError, UsageError
from kvdiag.registry.raw import Problem

PROBE_GLOB = "*.patch"
HEADER_END = "---"
KINDS = ("instrument", "fix")
NAME_KEY = "kvdiag-probe"
REQUIRED_KEYS = (NAME_KEY, "defect", "kind", "repository", "commit", "path-prefix", "output-correct",
                 "requires", "summary")

_KEY_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):(?:[ \t]+(?P<value>.*))?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DEFECT = re.compile(r"^(?:D[1-9][0-9]*|any)$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_DIFF_FILE = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$", re.M)
_NEW_FILE = re.compile(r"^--- /dev/null$", re.M)


@dataclass(frozen=True)
class Probe:
    """One probe file, its header parsed and validated."""

    name: str
    defect: str
    kind: str                     # "instrument" | "fix"
    repository: str
    commit: str
    path_prefix: str              # the header's text; :attr:`prefix` is its first word
    output_correct: str           # the header's text; :attr:`keeps_output_correct` reads it
    requires: tuple[str, ...]
    summary: str
    path: Path

    @property
    def prefix(self) -> str:
        """The path prefix itself (``src/ggml-cuda``), without the explanation after it."""
        words = self.path_prefix.split()
        return words[0].rstrip(",;:") if words else ""

    @property
    def keeps_output_correct(self) -> bool | None:
        """True for 'yes…', False for 'no…', None when it is to be checked ('expected yes…', 'unknown')."""
        first = self.output_correct.split()[0].lower().rstrip(",;:") if self.output_correct.split() else ""
        return {"yes": True, "no": False}.get(first)

    @property
    def diff(self) -> str:
        """The git diff part of the file (everything after the ``---`` line)."""
        return split_probe_text(self.path.read_text(encoding="utf-8"))[1]

    def touched_files(self) -> tuple[tuple[str, bool], ...]:
        """(path, is_new) of every file the diff touches, as written in the diff."""
        return touched_files(self.diff)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "defect": self.defect, "kind": self.kind, "repository": self.repository,
                "commit": self.commit, "path_prefix": self.path_prefix, "output_correct": self.output_correct,
                "requires": list(self.requires), "summary": self.summary, "path": str(self.path)}


@dataclass(frozen=True)
class ProbeSet:
    """Every probe of a folder, and the problems of the files that are not probes."""

    probes: tuple[Probe, ...]
    problems: tuple[Problem, ...]
    root: Path

    def __iter__(self):
        return iter(self.probes)

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.probes)

    def get(self, name: str) -> Probe:
        """The probe called ``name``, or a path to a probe file; ProbeError naming the closest names."""
        for probe in self.probes:
            if probe.name == name:
                return probe
        as_path = Path(name).expanduser()
        if name.endswith(".patch") and as_path.is_file():
            return parse_probe_file(as_path)
        bad = [p for p in self.problems if Path(p.file).stem == name]
        if bad:
            raise ProbeError(f"probe {name!r} is malformed: {bad[0]}")
        close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.3)
        hint = f"; closest: {', '.join(close)}" if close else f"; known: {', '.join(self.names()) or 'none'}"
        raise ProbeError(f"no probe {name!r} in {self.root}{hint}")

    def resolve(self, names: Iterable[str]) -> tuple[Probe, ...]:
        return tuple(self.get(n) for n in names)


class ProbeFileError(ValueError):
    """Problems of one probe file (all of them), for :func:`parse_probe_file`'s callers."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def default_probes_dir() -> Path:
    return resources.probes_dir()


def split_probe_text(text: str) -> tuple[str, str]:
    """(header, diff): the text before the first line that is exactly ``---``, and after it."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == HEADER_END:
            return "".join(lines[:i]), "".join(lines[i + 1:])
        if line.startswith("diff --git "):
            break
    raise ValueError(f"no header end: a line '{HEADER_END}' must close the header before the diff")


def parse_header(header: str, file: str) -> tuple[dict[str, str], list[Problem]]:
    """``key: value`` lines with indented continuation lines; every problem, not only the first."""
    fields: dict[str, str] = {}
    problems: list[Problem] = []
    current: str | None = None
    for number, raw in enumerate(header.splitlines(), start=1):
        if not raw.strip():
            current = None
            continue
        if raw[0] in " \t":
            if current is None:
                problems.append(Problem(file, f"line {number}", "continuation line without a key above it"))
            else:
                fields[current] = (fields[current] + " " + raw.strip()).strip()
            continue
        m = _KEY_LINE.match(raw.rstrip())
        if not m:
            problems.append(Problem(file, f"line {number}", f"not a 'key: value' line: {raw.strip()[:60]!r}"))
            current = None
            continue
        key = m.group("key").lower()
        if key in fields:
            problems.append(Problem(file, key, f"given twice (line {number})"))
        fields[key] = (m.group("value") or "").strip()
        current = key
    return fields, problems


def parse_requires(value: str) -> tuple[str, ...]:
    """``none`` → (); otherwise names separated by commas and/or spaces."""
    if value.strip().lower() in ("none", "-", ""):
        return ()
    return tuple(dict.fromkeys(n for n in re.split(r"[,\s]+", value.strip()) if n))


def touched_files(diff: str) -> tuple[tuple[str, bool], ...]:
    """(path, is_new) per ``diff --git`` section of ``diff``."""
    out: list[tuple[str, bool]] = []
    sections = list(_DIFF_FILE.finditer(diff))
    for i, m in enumerate(sections):
        end = sections[i + 1].start() if i + 1 < len(sections) else len(diff)
        body = diff[m.end():end]
        out.append((m.group("b"), bool(_NEW_FILE.search(body))))
    return tuple(out)


def parse_probe_file(path: Path) -> Probe:
    """Parse and validate one probe file; raises ProbeFileError listing every problem."""
    file = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeFileError([Problem(file, "(file)", f"cannot read: {exc}")]) from None
    try:
        header, diff = split_probe_text(text)
    except ValueError as exc:
        raise ProbeFileError([Problem(file, "(file)", str(exc))]) from None
    fields, problems = parse_header(header, file)
    add = lambda key, msg: problems.append(Problem(file, key, msg))  # noqa: E731
    for key in REQUIRED_KEYS:
        if key not in fields:
            add(key, "required key is missing")
        elif not fields[key]:
            add(key, "empty value")
    for key in fields:
        if key not in REQUIRED_KEYS:
            add(key, f"unknown key (known: {', '.join(REQUIRED_KEYS)})")
    name = fields.get(NAME_KEY, "")
    if name and not _NAME.match(name):
        add(NAME_KEY, f"{name!r} is not a plain name (letters, digits, '.', '_', '-')")
    elif name and name != path.stem:
        add(NAME_KEY, f"{name!r} differs from the file name {path.stem!r}")
    if fields.get("defect") and not _DEFECT.match(fields["defect"]):
        add("defect", f"{fields['defect']!r} is not a registry id like D2 (or 'any', a probe every entry may use)")
    if fields.get("kind") and fields["kind"] not in KINDS:
        add("kind", f"{fields['kind']!r} is not one of {', '.join(KINDS)}")
    if fields.get("commit") and not _COMMIT.match(fields["commit"]):
        add("commit", f"{fields['commit']!r} is not a commit id (7 to 40 lower-case hex digits)")
    if fields.get("repository") and not re.match(r"^(https?://|git@|ssh://|file://)\S+$", fields["repository"]):
        add("repository", f"{fields['repository']!r} is not a repository URL")
    requires = parse_requires(fields.get("requires", ""))
    for req in requires:
        if not _NAME.match(req):
            add("requires", f"{req!r} is not a probe name")
        elif req == name:
            add("requires", "a probe cannot require itself")
    if not touched_files(diff):
        add("(diff)", "no 'diff --git a/… b/…' section after the header")
    if problems:
        raise ProbeFileError(problems)
    return Probe(name=name, defect=fields["defect"], kind=fields["kind"], repository=fields["repository"],
                 commit=fields["commit"], path_prefix=fields["path-prefix"],
                 output_correct=fields["output-correct"], requires=requires, summary=fields["summary"],
                 path=path)


def load_probes(root: Path | None = None) -> ProbeSet:
    """Every ``*.patch`` of ``root`` (default: the project's probes/); bad files become problems."""
    root = Path(root) if root is not None else default_probes_dir()
    if not root.is_dir():
        raise UsageError(f"probes folder not found: {root}")
    probes: list[Probe] = []
    problems: list[Problem] = []
    for path in sorted(root.glob(PROBE_GLOB)):
        try:
            probes.append(parse_probe_file(path))
        except ProbeFileError as exc:
            problems.extend(exc.problems)
    names: dict[str, Probe] = {}
    for probe in probes:
        if probe.name in names:
            problems.append(Problem(probe.path.name, NAME_KEY,
                                    f"duplicate name {probe.name!r} (also {names[probe.name].path.name})"))
        names.setdefault(probe.name, probe)
    for probe in probes:
        for req in probe.requires:
            if req not in names:
                problems.append(Problem(probe.path.name, "requires", f"unknown probe {req!r}"))
    return ProbeSet(probes=tuple(probes), problems=tuple(problems), root=root)
