"""A compute-sanitizer report read in one pass with bounded memory: what `kvdiag analyze` prints.

``parse_sanitizer`` keeps every finding, because the engine needs them (a case's own
findings, the lines a verdict quotes). A log a user hands `kvdiag analyze` can hold
hundreds of thousands: a 200 MB synccheck log took 1.5 GB of memory that way. The
digest keeps only what analyze prints — each site's first finding, its count and its
blocks, the instantiations in order of appearance, the tool's own lines — and lets each
finding go once it is folded in. Its sites and instantiations are exactly those of
``fold_sites`` and ``instantiations`` over the whole report, in the same order (the
tests compare both on every recorded log).

One subtlety keeps it exact: a finding whose kind does not name its tool (an API
error, "other") is credited to the tool the report names, which a later line may be
the first to name. Such a finding is folded under a placeholder and moved to its
real site when the report ends.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace

from kvdiag.parse.sanitizer import (MARKER, ReportReader, SanitizerFinding, SanitizerReport, SanitizerSite,
                                    check_tool)
from kvdiag.parse.text import clean_line

__all__ = ["SanitizerDigest", "SanitizerDigester"]

_LATE = "\0tool named later"


@dataclass(frozen=True)
class SanitizerDigest(SanitizerReport):
    """A report whose findings were counted and folded into its sites, not kept (``findings`` is
    empty): ``printed`` says how many there were, ``instantiations`` what they named, in order."""

    printed: int = 0
    instantiations: tuple[str, ...] = ()

    @property
    def printed_count(self) -> int:
        return self.printed


@dataclass
class _Fold:
    first: SanitizerFinding
    order: int
    count: int = 0
    blocks: set = field(default_factory=set)

    def take(self, finding: SanitizerFinding) -> None:
        self.count += 1
        if finding.block is not None:
            self.blocks.add(finding.block)

    def merge(self, other: "_Fold") -> None:
        if other.order < self.order:
            self.first, self.order = other.first, other.order
        self.count += other.count
        self.blocks |= other.blocks


def _key(f: SanitizerFinding, tool: str | None) -> tuple:
    return (tool, f.kind, f.kernel, f.file, f.line, f.offset if f.line is None else None)


class SanitizerDigester:
    """Feed it the log's lines (raw, one at a time); ``result()`` once they are all in."""

    def __init__(self, tool: str | None = None, prefix: str = MARKER) -> None:
        check_tool(tool)
        self._parser = ReportReader(tool, prefix, on_block=self._take)
        self._folds: dict[tuple, _Fold] = {}
        self._instantiations: dict[str, None] = {}
        self._printed = 0
        self._line_no = 0

    def feed(self, line: str) -> None:
        self._line_no += 1
        self._parser.feed(clean_line(line), self._line_no)

    def _take(self, block) -> None:
        tool = self._parser.finding_tool(block.kind)
        finding = block.finish(_LATE if tool is None else tool)
        key = _key(finding, finding.tool)
        fold = self._folds.get(key)
        if fold is None:
            fold = self._folds[key] = _Fold(finding, self._printed)
        fold.take(finding)
        self._printed += 1
        for inst in (finding.instantiation, *(frame.instantiation for frame in finding.device_frames)):
            if inst:
                self._instantiations.setdefault(inst, None)

    def result(self) -> SanitizerDigest:
        report = self._parser.result()            # closes the last block; keeps no finding
        fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
        return SanitizerDigest(**{**fields, "sites": self._sites(report.tool)}, printed=self._printed,
                               instantiations=tuple(self._instantiations))

    def _sites(self, report_tool: str | None) -> tuple[SanitizerSite, ...]:
        folds: dict[tuple, _Fold] = {}
        for key, fold in self._folds.items():
            if key[0] == _LATE:
                fold.first = replace(fold.first, tool=report_tool)
                key = _key(fold.first, report_tool)
            if key in folds:
                folds[key].merge(fold)
            else:
                folds[key] = fold
        ordered = sorted(folds.values(), key=lambda f: (-f.count, f.order))
        return tuple(SanitizerSite(tool=f.first.tool, kind=f.first.kind, kernel=f.first.kernel,
                                   kernel_name=f.first.kernel_name, template_args=f.first.template_args,
                                   file=f.first.file, line=f.first.line,
                                   offset=f.first.offset if f.first.line is None else None, count=f.count,
                                   blocks=len(f.blocks), first=f.first) for f in ordered)
