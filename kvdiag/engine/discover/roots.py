"""Thousands of findings into a few root causes: one per (tool, kind, site, function).

ClusterFuzz files a crash under its type and the top frames of its stack; the GPU analogue is
the access site (file:line) and the function that the tool names there, with its template
arguments stripped so that 40 instantiations of one kernel are one root. A shared device
helper (``block_reduce``) that several kernels inline is therefore one root listing every
kernel that reached it: a reader sees at once whether the helper's race is one cause or
several. Racecheck warnings are kept apart (``warning`` roots), not counted as defects
unless asked. An abort is a root of its own kind at the line that aborted.

``root_key`` is the one grouping rule: the report, the registry matcher and the drafts all
read roots made by ``group_roots``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kvdiag.engine.discover.cases import CaseRecord
from kvdiag.engine.discover.findings import ABORT, CaseFinding, case_elements

CUDA_SOURCES = "ggml-cuda/"
ANY_TOOL = "any"         # the tool of an abort root: every tool that ran the case saw it
MAX_LISTED = 12     # kernels and instantiations a root lists by name (all are counted)


@dataclass(frozen=True)
class RootKey:
    tool: str
    kind: str
    site: str            # file:line as the tree names it (or function+offset without -lineinfo)
    function: str
    warning: bool = False

    def label(self) -> str:
        severity = " (warning)" if self.warning else ""
        return f"{self.tool} {self.kind}{severity} at {self.site} in {self.function}"


def site_of(finding: CaseFinding, relative: Mapping[str, str] | None = None) -> str:
    """``src/ggml-cuda/cpy.cu:57``: the printed path made relative to the tree where it is known
    (``relative``: printed path -> tree path), else the path as printed; without -lineinfo the
    function and offset stand in for the line."""
    if finding.file:
        path = (relative or {}).get(finding.file) or finding.file
        return f"{path}:{finding.line}" if finding.line is not None else path
    return f"{finding.function or '?'}{finding.offset or ''}"


def root_key(finding: CaseFinding, relative: Mapping[str, str] | None = None) -> RootKey:
    """The root a finding belongs to. An abort is the program's, not the tool's: the same
    ``GGML_ASSERT`` under racecheck and synccheck is one root (its ``tools`` say which saw it)."""
    tool = ANY_TOOL if finding.kind.startswith(ABORT) else finding.tool
    return RootKey(tool=tool, kind=finding.kind, site=site_of(finding, relative),
                   function=finding.function or "?", warning=finding.is_warning)


@dataclass
class Root:
    key: RootKey
    kernels: dict[str, int] = field(default_factory=dict)          # launching kernel (no template args) -> findings
    instantiations: dict[str, int] = field(default_factory=dict)   # launching instantiation -> findings
    ops: dict[str, int] = field(default_factory=dict)               # op -> cases
    peers: dict[str, int] = field(default_factory=dict)             # racecheck: the other sides' file:line
    tools: dict[str, int] = field(default_factory=dict)             # tool -> cases in which it saw the root
    cases: int = 0
    errors: int = 0                                                  # errors the findings stand for
    printed: int = 0                                                 # printed blocks
    numeric_failed: int = 0                                          # of its cases, FAIL in the numeric test
    numeric_unchecked: int = 0                                       # of its cases, no numeric test ran
    smallest: dict[str, Any] | None = None                           # {op, params, elements}
    source_line: str | None = None                                   # the site's line in this tree
    path: str | None = None                                          # the site's file in this tree, when placed
    line: int | None = None
    known: str | None = None                                         # the registry entry it matches
    matched_by: str | None = None                                    # why it matches that entry
    example: dict[str, Any] | None = None                            # one finding, as printed
    frames: dict[str, Any] | None = None                             # its smallest case rerun with frames (discover.reframe)

    @property
    def is_abort(self) -> bool:
        return self.key.kind.startswith(ABORT)

    @property
    def is_defect(self) -> bool:
        """A root that counts as a defect: anything but a racecheck warning."""
        return not self.key.warning

    def take(self, record: CaseRecord, findings: list[CaseFinding]) -> None:
        self.cases += 1
        self.tools[record.tool] = self.tools.get(record.tool, 0) + 1
        self.ops[record.op] = self.ops.get(record.op, 0) + 1
        self.numeric_failed += record.numeric_failed
        self.numeric_unchecked += record.numeric_status is None
        for finding in findings:
            if finding.peer:
                self.peers[finding.peer] = self.peers.get(finding.peer, 0) + 1
            self.errors += finding.count
            self.printed += 1
            if finding.kernel:
                name = finding.kernel.split("<", 1)[0]
                self.kernels[name] = self.kernels.get(name, 0) + 1
                self.instantiations[finding.kernel] = self.instantiations.get(finding.kernel, 0) + 1
        if self.example is None and findings:
            self.example = findings[0].to_dict()
        elements = case_elements(record.params)
        current = self.smallest
        if current is None or (elements, len(record.params)) < (current["elements"], len(current["params"])):
            self.smallest = {"op": record.op, "params": record.params, "elements": elements}

    def to_dict(self) -> dict[str, Any]:
        ranked = sorted(self.instantiations.items(), key=lambda kv: (-kv[1], kv[0]))
        return {"tool": self.key.tool, "kind": self.key.kind, "warning": self.key.warning, "site": self.key.site,
                "function": self.key.function, "path": self.path, "line": self.line,
                "source_line": self.source_line, "kernels": dict(sorted(self.kernels.items())),
                "instantiations": dict(ranked[:MAX_LISTED]), "instantiation_count": len(ranked),
                "ops": dict(sorted(self.ops.items())), "tools": dict(sorted(self.tools.items())),
                "peers": dict(sorted(self.peers.items())), "cases": self.cases, "errors": self.errors,
                "printed": self.printed, "numeric_failed": self.numeric_failed,
                "numeric_unchecked": self.numeric_unchecked, "smallest": self.smallest,
                "known": self.known, "matched_by": self.matched_by, "example": self.example,
                "frames": self.frames}


def group_roots(records: Iterable[CaseRecord], relative: Mapping[str, str] | None = None) -> list[Root]:
    """Every finding of every case grouped by ``root_key``; a case counts once per root it hits.
    Ordered defects first, then by cases hit, then by site (a stable order for reports and tests)."""
    roots: dict[RootKey, Root] = {}
    for record in records:
        per_root: dict[RootKey, list[CaseFinding]] = {}
        for finding in record.findings:
            per_root.setdefault(root_key(finding, relative), []).append(finding)
        for key, findings in per_root.items():
            roots.setdefault(key, Root(key)).take(record, findings)
    return sorted(roots.values(), key=lambda r: (r.key.warning, -r.cases, r.key.tool, r.key.site, r.key.function))


def relative_paths(printed: Iterable[str], source_dir: str | os.PathLike | None,
                   tree_files: Iterable[str] = ()) -> dict[str, str]:
    """Printed path -> the path inside the source tree: an absolute path under ``source_dir`` is cut
    to it; any other (a basename, another machine's path) is the one file of ``tree_files`` that
    ends with it, when exactly one does."""
    root = os.path.normpath(str(source_dir)) + os.sep if source_dir else None
    files = list(tree_files)
    out: dict[str, str] = {}
    for path in set(printed):
        norm = os.path.normpath(path)
        if root and norm.startswith(root):
            out[path] = norm[len(root):]
            continue
        tail = norm.lstrip(os.sep)
        hits = [f for f in files if f == tail or f.endswith(os.sep + tail) or tail.endswith(os.sep + f)]
        if len(hits) != 1:
            base = os.path.basename(norm)
            hits = [f for f in files if os.path.basename(f) == base]
        if len(hits) > 1:       # a basename in several backends: the CUDA backend's is the one compute-sanitizer ran
            hits = [f for f in hits if CUDA_SOURCES in f.replace(os.sep, "/")]
        if len(hits) == 1:
            out[path] = hits[0]
    return out
