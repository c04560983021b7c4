"""Registry entries as frozen values: what the engine and the formatters read.

The linter works on the raw TOML (so it can report every problem); these types
are built only from entries that passed it, so their fields can be trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kvdiag.registry.ranges import GitRange
from kvdiag.registry.sections import Applies, DriftSpec, Requires, ScanSpec, from_table


@dataclass(frozen=True)
class Matcher:
    """One table of the signature: all of an entry's matchers must match in one run.

    One type for every matcher ``type``: each reads the attributes its type uses (the
    linter checked the table); ``fields`` is the table as written, for `describe`.
    """

    type: str
    fields: Mapping[str, Any] = field(default_factory=dict, repr=False)
    step: str | None = None          # the repro step it applies to (None: every step)
    tool: str | None = None          # sanitizer
    kind: str | None = None          # sanitizer finding kind, or abort kind
    site: str | None = None          # sanitizer: regex over file:line
    kernel: str | None = None        # sanitizer: regex over the kernel's name
    min_count: int = 1               # sanitizer findings, or failing cases
    message: str | None = None       # abort
    backtrace: str | None = None     # abort
    params: str | None = None        # case
    status: str = "FAIL"             # case
    metric: str | None = None        # case
    min_value: float | None = None   # case
    pattern: str | None = None       # output, relative (with a `value` group)
    stream: str = "combined"         # output, relative
    arm: str | None = None           # relative: the comparison arm's step
    ratio_min: float | None = None   # relative
    difference_min: float | None = None  # relative
    unit: str = ""                   # relative: for the text
    pick: str = "max"                # relative: which of several matching lines counts
    signal: str | None = None        # exit
    code: int | None = None          # exit

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> "Matcher":
        known = {f for f in cls.__dataclass_fields__} - {"type", "fields"}
        return cls(type=table["type"], fields=dict(table), **{k: v for k, v in table.items() if k in known})

    def describe(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.fields.items() if k != "type"]
        return f"{self.type}({', '.join(parts)})"


@dataclass(frozen=True)
class Step:
    """One repro step: what to run, under which sanitizer, and how to tell it ran."""

    name: str
    kind: str
    description: str
    timeout: int
    argv: tuple[str, ...] = ()
    commands: tuple[tuple[str, ...], ...] = ()
    default: bool = False
    runs: int = 1
    expected_seconds: float | None = None
    tty: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    sanitizer: str | None = None
    sanitizer_options: tuple[str, ...] = ()
    kernel_filter: str | None = None
    print_limit: int | None = None
    min_cases: int = 1
    expect: tuple[str, ...] = ()       # every pattern must be seen (the loader makes one string a 1-tuple)
    evidence: tuple[str, ...] = ()
    compare_with: str | None = None    # a signature-less step run once after this one (its comparison arm)
    vars: Mapping[str, Any] = field(default_factory=dict)
    requires_env: tuple[str, ...] = ()
    requires_binaries: tuple[str, ...] | None = None   # None: the entry's requires.binaries
    cmake_defines: Mapping[str, str] = field(default_factory=dict)   # compile: the scratch configure's -D options
    sources: tuple[str, ...] = ()                                    # compile: translation units to build
    exercise_probe: str | None = None   # backend-ops: the probe that adds this step's cases to a tree lacking them
    cmake_options: tuple[str, ...] | None = None    # compile: options the tree must define; None: [applies]'s
    absent_when_unlisted: str | None = None   # backend-ops: why a program listing no matching case lacks the defect

    def required_options(self, entry_options: tuple[str, ...]) -> tuple[str, ...]:
        """The CMake options this step needs the tree to define: its own list, else the entry's."""
        return self.cmake_options if self.cmake_options is not None else tuple(entry_options)

    @property
    def command_templates(self) -> tuple[tuple[str, ...], ...]:
        """Every command of the step, in order (a single ``argv`` is one command)."""
        return self.commands if self.commands else ((self.argv,) if self.argv else ())


@dataclass(frozen=True)
class Entry:
    """A defect of the registry."""

    id: str
    title: str
    summary: str
    owner: str
    status: str
    severity: str
    reported: str
    modified: str
    path: Path
    body: str
    raw: Mapping[str, Any]
    aliases: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    source: str | None = None
    references: tuple[Mapping[str, str], ...] = ()
    location: Mapping[str, Any] = field(default_factory=dict)
    affected: tuple[Mapping[str, str], ...] = ()
    applies: Applies = field(default_factory=Applies)
    requires: Requires = field(default_factory=Requires)
    steps: tuple[Step, ...] = ()
    signature: tuple[Matcher, ...] = ()
    scan: ScanSpec | None = None
    radius: tuple[Mapping[str, Any], ...] = ()       # measured blast radii, one per tree (registry.radius)
    drift: DriftSpec | None = None
    probes: tuple[Mapping[str, str], ...] = ()
    # the sanitizer signatures of the entries named in `related`, by id (registry.loader fills them):
    # their findings in this entry's runs are set apart, not a different finding (parse.set_apart)
    neighbours: tuple[tuple[str, tuple[Matcher, ...]], ...] = ()

    def __post_init__(self) -> None:
        # A table given as written (a mapping) becomes its typed section, whoever built the entry.
        for name, cls in (("applies", Applies), ("requires", Requires), ("scan", ScanSpec), ("drift", DriftSpec)):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, from_table(cls, value))

    @property
    def ranges(self) -> tuple[GitRange, ...]:
        """The ``[[affected]]`` tables as OSV GIT ranges."""
        return tuple(GitRange.from_table(t) for t in self.affected)

    @property
    def number(self) -> int:
        return int(self.id[1:]) if self.id[1:].isdigit() else 10**6

    @property
    def tools(self) -> tuple[str, ...]:
        """Sanitizer tools any step uses, for `kvdiag list`."""
        seen: list[str] = []
        for step in self.steps:
            if step.sanitizer and step.sanitizer not in seen:
                seen.append(step.sanitizer)
        return tuple(seen)

    @property
    def default_step(self) -> Step:
        for step in self.steps:
            if step.default:
                return step
        return self.steps[0]

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    def needs(self) -> tuple[str, ...]:
        """A short list of what running it needs, for `kvdiag list`."""
        out: list[str] = list(self.requires.binaries)
        if self.requires.gpu:
            out.append("GPU")
        if self.requires.sanitizer:
            out.append("compute-sanitizer")
        out += [f"${name}" for name in self.requires.env]
        return tuple(out)

    def section(self, heading: str) -> str:
        """The text under a Markdown ``## heading`` of the body ('' when absent)."""
        lines = self.body.splitlines()
        out: list[str] = []
        inside = False
        for line in lines:
            if line.startswith("## "):
                inside = line[3:].strip().lower() == heading.lower()
                continue
            if inside:
                out.append(line)
        return "\n".join(out).strip()


def matchers_for(entry: Entry, step_name: str) -> tuple[Matcher, ...]:
    """The signature matchers that judge step ``step_name``: those naming it, and those naming no step.

    A question about the entry's own tables, asked by the judge, by `run --step` (a step without
    one is not a verdict) and by the arm a run records; so it lives with the entry, not the judge."""
    return tuple(m for m in entry.signature if m.step in (None, step_name))
