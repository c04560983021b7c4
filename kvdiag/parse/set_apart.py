"""Sanitizer findings that are not a *different* finding: a related entry's signature, or a racecheck warning.

A sanitized run of one entry's step can print findings of another defect the same cases reach: D15's
racecheck step runs every SSM_SCAN case, and on a tree older than 2026-01-06 the Mamba-2 kernel's own
race (D17) is printed beside it. Such findings do not hide this entry's: the tool reports every hazard
it sees, up to its print limit. So a finding that matches the sanitizer signature of an entry this one
names as ``related`` (registry.loader gives each entry its neighbours' matchers) is set apart, named,
and does not make the verdict inconclusive. Racecheck's warnings (hazards it does not call errors, such
as CUB's TempStorage reuse) are set apart too, as `kvdiag discover` lists them apart. Everything else
printed, or anything counted and not printed, stays a different finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvdiag.parse.sanitizer import SanitizerFinding, SanitizerReport

__all__ = ["SetApart", "finding_matches", "set_apart"]


def _search(pattern: str | None, text: str | None) -> bool:
    return pattern is None or (text is not None and re.search(pattern, text) is not None)


def finding_matches(m, f: SanitizerFinding) -> bool:
    """One printed finding against a sanitizer matcher: its kind, its site (when the output has file:line:
    without -lineinfo the site cannot be checked) and its kernel."""
    return ((not m.kind or f.kind == m.kind)
            and (f.file is None or _search(m.site, f"{f.file}:{f.line}"))
            and _search(m.kernel, f.kernel_name))


@dataclass(frozen=True)
class SetApart:
    by_entry: dict[str, tuple[SanitizerFinding, ...]] = field(default_factory=dict)   # a related entry's
    warnings: tuple[SanitizerFinding, ...] = ()                                        # racecheck's warnings
    rest: tuple[SanitizerFinding, ...] = ()                                            # different findings
    unprinted: bool = False                    # the tool counted findings it did not print

    @property
    def different(self) -> bool:
        return bool(self.rest) or self.unprinted

    def note(self) -> str:
        """``the other findings: 6 of D17's signature (ssm-scan.cu:178), 16 racecheck warning(s)``; empty
        when nothing was set apart."""
        said = []
        for entry_id, found in self.by_entry.items():
            sites = ", ".join(dict.fromkeys(f"{f.file}:{f.line}" if f.file else f.kernel_name or "?" for f in found))
            said.append(f"{len(found)} of {entry_id}'s signature ({sites})")
        if self.warnings:
            said.append(f"{len(self.warnings)} racecheck warning(s)")
        return f"the other findings: {', '.join(said)}" if said else ""


def set_apart(report: SanitizerReport, neighbours=()) -> SetApart:
    """Split the report's printed findings: ``neighbours`` are (entry id, its sanitizer matchers) pairs."""
    by_entry: dict[str, list[SanitizerFinding]] = {}
    warnings, rest = [], []
    for f in report.findings:
        owner = next((entry_id for entry_id, matchers in neighbours
                      if any((not m.tool or not report.tool or m.tool == report.tool) and finding_matches(m, f)
                             for m in matchers)), None)
        if owner is not None:
            by_entry.setdefault(owner, []).append(f)
        elif report.tool == "racecheck" and f.severity == "warning":
            warnings.append(f)
        else:
            rest.append(f)
    unprinted = bool(report.not_printed) or bool(report.error_count and not report.findings)
    return SetApart({k: tuple(v) for k, v in by_entry.items()}, tuple(warnings), tuple(rest), unprinted)
