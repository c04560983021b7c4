"""The catalogue of canary kernels: which kernel proves which detector works here.

Each compute-sanitizer tool gets one *pair*: a positive canary that carries one
defect of the class the tool exists to find, and its fixed twin. A tool earns
trust on a machine only when it reports the positive (the expected kind, at the
expected file:line) and stays silent on the twin (see ``kvdiag.controls.doctor``).

The expected line is not written here: it is found by scanning the ``.cu`` file
for the one line carrying ``// KVDIAG-EXPECT: <kind>``, so editing a canary cannot
leave a stale line number behind. Every canary is one ``extern "C"`` kernel named
like its file, with the same parameters ``(const float *in, float *out, int n)``,
so one launcher runs them all; what differs (geometry, whether ``in`` is written
before the launch) is data in :class:`Canary`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kvdiag import resources
from kvdiag.constants import SANITIZER_TOOLS

__all__ = [
    "ALL_TOOLS",
    "CANARIES",
    "CANARY_DIR",
    "Canary",
    "ControlPair",
    "EXPECT_MARKER",
    "MarkerError",
    "PAIRS",
    "canary",
    "find_expect_markers",
    "pair_for",
]

ALL_TOOLS = SANITIZER_TOOLS          # every tool has a canary pair

EXPECT_MARKER = "KVDIAG-EXPECT:"
_MARKER_RE = re.compile(r"//\s*KVDIAG-EXPECT:\s*(?P<kind>[a-z][a-z-]*)\s*$")


CANARY_DIR = resources.canaries_dir()


class MarkerError(ValueError):
    """A positive canary's ``KVDIAG-EXPECT`` marker is missing, doubled or of the wrong kind."""


@dataclass(frozen=True)
class Canary:
    """One kernel of ours, in ``repro/canaries/<name>.cu``, exported as ``extern "C" <name>``."""

    name: str
    tool: str                         # the compute-sanitizer tool this canary controls
    positive: bool                    # True: carries the defect; False: the fixed twin
    twin: str                         # the other canary of the pair
    expected_kind: str | None         # kvdiag's normalised finding kind (positives only)
    block: tuple[int, int, int]
    grid: tuple[int, int, int] = (1, 1, 1)
    n: int = 128                      # floats in each of ``in`` and ``out`` (cudaMalloc'd exactly)
    init_input: bool = True           # memset ``in`` before the launch (False only for uninit_read)
    sanitizer_options: tuple[str, ...] = ()
    summary: str = ""

    @property
    def source(self) -> Path:
        return CANARY_DIR / f"{self.name}.cu"

    @property
    def filename(self) -> str:
        return f"{self.name}.cu"

    @property
    def role(self) -> str:
        return "positive" if self.positive else "negative"

    def expected_line(self) -> int | None:
        """The line the tool must point at (positives), from the source's marker; None for twins.

        Raises :class:`MarkerError` unless a positive has exactly one marker and it
        names :attr:`expected_kind`.
        """
        markers = find_expect_markers(self.source)
        if not self.positive:
            if markers:
                raise MarkerError(f"{self.filename}: a negative control must carry no {EXPECT_MARKER} marker "
                                  f"(found one on line {markers[0][0]})")
            return None
        if len(markers) != 1:
            where = ", ".join(str(line) for line, _ in markers) or "none"
            raise MarkerError(f"{self.filename}: expected exactly one {EXPECT_MARKER} marker, found {len(markers)} "
                              f"(lines: {where})")
        line, kind = markers[0]
        if kind != self.expected_kind:
            raise MarkerError(f"{self.filename}:{line}: marker says {kind!r}, the catalogue expects "
                              f"{self.expected_kind!r}")
        return line

    def expected_site(self) -> str | None:
        """``barrier_divergent.cu:27``: how the tool names the expected line (basename:line)."""
        line = self.expected_line()
        return None if line is None else f"{self.filename}:{line}"

    def to_dict(self) -> dict:
        try:
            line = self.expected_line()
        except (MarkerError, OSError) as exc:
            line, problem = None, str(exc)
        else:
            problem = None
        return {
            "name": self.name,
            "tool": self.tool,
            "role": self.role,
            "twin": self.twin,
            "expected_kind": self.expected_kind,
            "expected_file": self.filename if self.positive else None,
            "expected_line": line,
            "block": list(self.block),
            "grid": list(self.grid),
            "n": self.n,
            "init_input": self.init_input,
            "sanitizer_options": list(self.sanitizer_options),
            "summary": self.summary,
            **({"problem": problem} if problem else {}),
        }


@dataclass(frozen=True)
class ControlPair:
    tool: str
    positive: Canary
    negative: Canary


def find_expect_markers(source: Path) -> list[tuple[int, str]]:
    """``[(line_number, kind), ...]`` of every ``// KVDIAG-EXPECT: kind`` in ``source`` (1-based)."""
    found: list[tuple[int, str]] = []
    text = Path(source).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if EXPECT_MARKER not in line:
            continue
        m = _MARKER_RE.search(line)
        if m is None:
            raise MarkerError(f"{Path(source).name}:{number}: malformed marker; write "
                              f"'// {EXPECT_MARKER} <kind>' at the end of the line")
        found.append((number, m.group("kind")))
    return found


_SYNCCHECK_OPTIONS = ("--show-backtrace", "device")

CANARIES: dict[str, Canary] = {c.name: c for c in (
    Canary("barrier_divergent", "synccheck", True, "barrier_uniform", "barrier-divergence",
           block=(32, 4, 1), n=128, sanitizer_options=_SYNCCHECK_OPTIONS,
           summary="D2's pattern: warps with threadIdx.y % 4 == 0 reach a different __syncthreads() than the others"),
    Canary("barrier_uniform", "synccheck", False, "barrier_divergent", None,
           block=(32, 4, 1), n=128, sanitizer_options=_SYNCCHECK_OPTIONS,
           summary="the barrier hoisted out of the warp-divergent branch"),
    Canary("shared_race", "racecheck", True, "shared_race_fixed", "race-hazard",
           block=(64, 1, 1), n=64,
           summary="shared slot written, another warp's slot read, no barrier between"),
    Canary("shared_race_fixed", "racecheck", False, "shared_race", None,
           block=(64, 1, 1), n=64,
           summary="__syncthreads() between the shared write and the read"),
    Canary("oob_write", "memcheck", True, "oob_write_fixed", "invalid-write",
           block=(128, 1, 1), n=100,
           summary="guard i <= n: one float written past the end of an n-float cudaMalloc buffer"),
    Canary("oob_write_fixed", "memcheck", False, "oob_write", None,
           block=(128, 1, 1), n=100,
           summary="guard i < n"),
    Canary("uninit_read", "initcheck", True, "uninit_read_fixed", "uninitialized-access",
           block=(128, 1, 1), n=128, init_input=False,
           summary="reads a cudaMalloc'd buffer that nothing ever wrote"),
    Canary("uninit_read_fixed", "initcheck", False, "uninit_read", None,
           block=(128, 1, 1), n=128, init_input=True,
           summary="the same kernel; the launcher memsets the input first"),
)}

PAIRS: dict[str, ControlPair] = {
    c.tool: ControlPair(c.tool, c, CANARIES[c.twin]) for c in CANARIES.values() if c.positive
}


def canary(name: str) -> Canary:
    """The canary called ``name``; KeyError with the known names otherwise."""
    try:
        return CANARIES[name]
    except KeyError:
        raise KeyError(f"unknown canary {name!r}; known: {', '.join(CANARIES)}") from None


def pair_for(tool: str) -> ControlPair:
    """The positive/negative pair that controls ``tool``."""
    try:
        return PAIRS[tool]
    except KeyError:
        raise KeyError(f"no control pair for tool {tool!r}; known: {', '.join(PAIRS)}") from None
