"""What discovery keeps of one finding: the few fields a root is made of, in a plain record.

A sanitized batch prints thousands of blocks; discovery needs from each only where it
points (site, reporting function, launching kernel), what it is (tool, kind, error or
warning) and how many errors it stands for. ``CaseFinding`` is that, read once from the
parser's ``SanitizerFinding`` or ``AbortInfo`` and then grouped (``roots``), saved and
merged without the parser.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from kvdiag.parse.aborts import AbortInfo
from kvdiag.parse.sanitizer import HOST_API_KIND, SanitizerFinding, host_api_label, split_signature

ABORT = "abort"                   # the kind prefix of a process that died: "abort:ggml-assert", ...
# Frames of ggml's own abort path, never the function that failed.
_MACHINERY = re.compile(r"abort|backtrace|ggml_cuda_error|^_?_?libc|^raise$")
WARNING = "warning"               # racecheck's own severity: listed apart, not a defect unless asked
_NUMBERS = re.compile(r"(?<=[=\[,])\d+(?=[,\]]|$)")   # whole values: n=7, ne=[32,4]; not f32 or q4_0


@dataclass(frozen=True)
class CaseFinding:
    """One finding of one case, reduced to what grouping and reports read."""

    tool: str
    kind: str                     # the parser's kind (race-hazard, barrier-divergence, ...) or abort:<kind>
    file: str | None              # as printed (a path of the build machine, or a basename)
    line: int | None
    function: str | None          # the reporting function, template arguments stripped
    instantiation: str | None     # the reporting function with its template arguments
    kernel: str | None            # the launching kernel's instantiation (outermost device frame), when known
    severity: str | None = None   # racecheck: error | warning
    count: int = 1                # errors it stands for (racecheck: its hazards)
    message: str = ""
    offset: str | None = None
    peer: str | None = None       # racecheck: the other access's file:line (the race's other side)

    @property
    def is_warning(self) -> bool:
        return (self.severity or "").lower() == WARNING

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaseFinding":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def from_sanitizer(finding: SanitizerFinding, tool: str) -> CaseFinding:
    """The record of one parsed sanitizer block. The launching kernel is the outermost device
    frame (an inlined device function such as ``block_reduce`` reports itself, its kernel is
    the last frame); without frames the reporting function is taken as the kernel."""
    kernel = finding.device_frames[-1].instantiation if finding.device_frames else finding.instantiation
    severity = (finding.severity or "").lower() or None
    other = finding.peers[0] if finding.peers else None
    peer = f"{other.file}:{other.line}" if other is not None and other.file else None
    return CaseFinding(tool=finding.tool or tool, kind=finding.kind, file=finding.file, line=finding.line,
                       function=finding.kernel_name or _host_api(finding), instantiation=finding.instantiation,
                       kernel=kernel, severity=severity, count=max(1, finding.hazards or 1),
                       message=finding.message_key, offset=finding.offset, peer=peer)


def _host_api(finding: SanitizerFinding) -> str | None:
    """A host API record has no kernel: the call it names (``host API (cudaMemcpy source)``) stands in,
    so its root says what touched the memory instead of ``?``."""
    return host_api_label(finding) if finding.kind == HOST_API_KIND else None


def from_abort(info: AbortInfo, tool: str) -> CaseFinding:
    """An abort as a finding of its own kind at its site: ``GGML_ASSERT`` or ``GGML_ABORT`` at the
    file:line it printed, a CUDA error at the function and line ggml names after it."""
    function = info.function
    if function is None:
        function = next((s for s in info.symbols if not _MACHINERY.search(s)), None)
    if function:
        function, _ = split_signature(function)
    return CaseFinding(tool=tool, kind=f"{ABORT}:{info.kind}", file=info.file, line=info.line,
                       function=function or None, instantiation=None, kernel=None,
                       message=(info.message or "")[:300])


def case_elements(params: str) -> int:
    """How big a case is, to pick a root's smallest repro: the product of the positive integers
    in its parameter string (shapes, head sizes, KV lengths), 1 when it has none. A heuristic
    on purpose: test-backend-ops prints no element count, and every shape is in the string."""
    product = 1
    for number in _NUMBERS.findall(params):
        value = int(number)
        if value > 1:
            product *= min(value, 1 << 20)
        if product > 1 << 62:
            return 1 << 62
    return product
