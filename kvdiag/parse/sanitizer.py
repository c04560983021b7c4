"""Reader of NVIDIA compute-sanitizer output (memcheck, racecheck, synccheck, initcheck).

Why a parser and not a grep: kvdiag decides "this defect reproduces here" from
*where* the tool points (kernel instantiation, source line, block), from how many
errors it counted (the printed ones are capped by ``--print-limit``) and from
whether the tool ran to its end at all. All three come from the same text.

The text is either the tool's own ``--log-file`` (every line starts with the
``=========`` marker) or the combined stream of a run, where the target's output
is interleaved with the tool's, even mid-line::

    FLASH_ATTN_EXT(hsk=256,...): ========= Barrier error detected. Divergent thread(s) in block.

so the marker is searched anywhere in a line and what precedes it is ignored.
Parsing is one pass over the lines (``parse_sanitizer_lines`` takes any
iterable, an open file included); only the findings themselves are kept.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.parse.text import dataclass_dict, iter_lines, split_top_level, to_int

# size: one reader for four tools' report grammars, read in one pass over shared state; split
# by tool it would repeat the line grammar (marker, frames, summaries) four times.
TOOLS = SANITIZER_TOOLS

KINDS = (
    "barrier-divergence",
    "invalid-read",
    "invalid-write",
    "misaligned-access",
    "out-of-bounds",
    "race-hazard",
    "uninitialized-access",
    "api-error",
    "other",
)

MARKER = "========="

# Which tool reports a kind, for logs whose tool was not named by the caller.
_KIND_TOOL = {
    "barrier-divergence": "synccheck",
    "race-hazard": "racecheck",
    "uninitialized-access": "initcheck",
    "invalid-read": "memcheck",
    "invalid-write": "memcheck",
    "misaligned-access": "memcheck",
    "out-of-bounds": "memcheck",
}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Frame:
    """One code location the tool printed: a device frame or a race's other access."""

    function: str
    kernel_name: str | None
    file: str | None
    line: int | None
    offset: str | None = None
    template_args: tuple[str, ...] = ()

    @property
    def instantiation(self) -> str | None:
        """``name<args>`` of this frame's function."""
        return _instantiation(self.kernel_name, self.template_args)

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data["instantiation"] = self.instantiation
        return data


@dataclass(frozen=True)
class SanitizerFinding:
    """One error block of the tool's report.

    ``kernel`` is the signature exactly as printed; ``kernel_name`` and
    ``template_args`` are derived from it so that a registry entry can match
    "any instantiation of flash_attn_ext_f16_process_tile with D=256" without
    spelling the whole signature. ``file``/``line`` are None when the build
    lacked ``-lineinfo`` (the tool then prints only ``+0x...``).
    """

    tool: str | None
    kind: str
    message: str
    kernel: str | None = None
    kernel_name: str | None = None
    template_args: tuple[str, ...] = ()
    file: str | None = None
    line: int | None = None
    offset: str | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    device_frames: tuple[Frame, ...] = ()
    raw_lines: tuple[str, ...] = ()
    severity: str | None = None
    hazards: int | None = None
    peers: tuple[Frame, ...] = ()
    detail: str | None = None
    host_frames: tuple[str, ...] = ()
    line_no: int | None = None

    @property
    def instantiation(self) -> str | None:
        """``name<args>`` of the reporting kernel: what distinguishes template instances."""
        return _instantiation(self.kernel_name, self.template_args)

    @property
    def message_key(self) -> str:
        """The message without its trailing period and extra spaces.

        Tool versions differ only in that period (``...in block.`` vs
        ``...in block``); signatures compare this form.
        """
        return " ".join(self.message.split()).rstrip(".")

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data["instantiation"] = self.instantiation
        data["message_key"] = self.message_key
        return data


@dataclass(frozen=True)
class SanitizerSite:
    """Findings folded by (tool, kind, kernel, file, line).

    Thousands of findings usually come from one or two source lines executed by
    many threads; the site is what a defect signature names. Without
    ``-lineinfo`` the offset takes the place of the missing line in the key.
    """

    tool: str | None
    kind: str
    kernel: str | None
    kernel_name: str | None
    template_args: tuple[str, ...]
    file: str | None
    line: int | None
    offset: str | None
    count: int
    blocks: int
    first: SanitizerFinding

    def to_dict(self) -> dict:
        return dataclass_dict(self)


@dataclass(frozen=True)
class RacecheckSummary:
    """``RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)``."""

    hazards: int
    errors: int
    warnings: int

    def to_dict(self) -> dict:
        return dataclass_dict(self)


@dataclass(frozen=True)
class SanitizerReport:
    """Everything one sanitizer run said about the target and about itself.

    ``error_count`` is the tool's own total (first ``ERROR SUMMARY`` line);
    ``printed_count`` is how many blocks it actually printed; ``not_printed``
    is the difference the tool announces when ``--print-limit`` cut it short.
    """

    tool: str | None
    findings: tuple[SanitizerFinding, ...] = ()
    sites: tuple[SanitizerSite, ...] = ()
    error_count: int | None = None
    not_printed: int | None = None
    racecheck: RacecheckSummary | None = None
    summary_lines: tuple[str, ...] = ()
    target_error: bool = False
    process_failed: bool = False
    tool_errors: tuple[str, ...] = ()
    banner: bool = False

    @property
    def has_summary(self) -> bool:
        """The tool reached its end and counted: only then is "0 errors" evidence."""
        return self.error_count is not None or self.racecheck is not None

    @property
    def printed_count(self) -> int:
        return len(self.findings)

    def count_for(self, kind: str) -> int:
        """Printed findings of one kind."""
        return sum(1 for f in self.findings if f.kind == kind)

    @property
    def is_clean(self) -> bool:
        """Ran to the end, found nothing, and the tool itself did not fail."""
        if not self.has_summary or self.printed_count or self.tool_errors:
            return False
        if self.error_count:
            return False
        return not (self.racecheck and (self.racecheck.hazards or self.racecheck.errors))

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data.update(
            has_summary=self.has_summary,
            printed_count=self.printed_count,
            is_clean=self.is_clean,
        )
        return data


# ------------------------------------------------------------------ signatures

_ANON = "(anonymous namespace)"


def split_signature(signature: str) -> tuple[str, tuple[str, ...]]:
    """``void k<(int)1, (bool)0>(float *, int)`` -> ``("k", ("(int)1", "(bool)0"))``.

    Bracket depth is counted because template arguments are themselves
    parenthesised casts; ``(anonymous namespace)`` is masked so that its
    parentheses do not look like the parameter list.
    """
    sig = signature.strip()
    scan = sig.replace(_ANON, "A" * len(_ANON))
    operator = _OPERATOR.search(scan)
    if operator is not None and _first_open(scan[:operator.start()]) is None:
        return _operator_name(sig, scan, operator)
    open_at = _first_open(scan)
    head = sig if open_at is None else sig[:open_at]
    name = _last_token(head)
    if open_at is None or scan[open_at] != "<":
        return name, ()
    close_at = _matching(scan, open_at)
    inner = sig[open_at + 1 : close_at if close_at is not None else len(sig)]
    return name, split_top_level(inner)


# An operator's name holds the brackets or the space that end other names: ``__half2::operator =(…)``,
# ``functor::operator()(…)``, ``operator<<``, ``operator new``, ``operator float`` (a conversion).
_OPERATOR_SYMBOLS = r"\(\)|\[\]|->\*|->|<<=|>>=|<=>|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?"
_OPERATOR_WORDS = r"(?:new|delete)(?:\[\])?|[A-Za-z_][\w:]*(?:\s*[*&]+)?"
_OPERATOR = re.compile(rf"\boperator\b\s*(?:(?P<symbol>{_OPERATOR_SYMBOLS})|(?P<word>{_OPERATOR_WORDS}))")


def _operator_name(sig: str, scan: str, operator: re.Match[str]) -> tuple[str, tuple[str, ...]]:
    """``void __half2::operator =(const __half2&&)`` -> ``("__half2::operator=", ())``."""
    before = sig[:operator.start()]
    scope = _last_token(before) if before.strip() and not before[-1].isspace() else ""
    spelled = operator.group("symbol") or f" {operator.group('word')}"
    name = f"{scope}operator{spelled}"
    end = operator.end()
    while end < len(scan) and scan[end] == " " and operator.group("symbol"):
        end += 1                                    # ``operator< <(int)3>``: its template arguments
    if end < len(scan) and scan[end] == "<":
        close_at = _matching(scan, end)
        return name, split_top_level(sig[end + 1 : close_at if close_at is not None else len(sig)])
    return name, ()


def _first_open(text: str) -> int | None:
    """Index of the first ``<`` or ``(``: where the name ends and its arguments begin."""
    for i, ch in enumerate(text):
        if ch in "<(":
            return i
    return None


def _matching(text: str, open_at: int) -> int | None:
    """Index of the bracket that closes the one at ``open_at``."""
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
            if depth == 0:
                return i
    return None


def _last_token(head: str) -> str:
    """The name in ``void ns::kern``: the last space-separated word, return type dropped."""
    head = head.strip()
    if _ANON in head:
        after = head.rpartition(_ANON)[2].split()
        return _ANON + after[0] if after else _ANON
    words = head.split()
    return words[-1] if words else head


def _instantiation(name: str | None, args: tuple[str, ...]) -> str | None:
    if not name:
        return None
    return f"{name}<{', '.join(args)}>" if args else name


# ----------------------------------------------------------------------- sites

_NEW_SITE = re.compile(
    r"^(?P<func>.+?)\+(?P<off>0x[0-9a-fA-F]+)"
    r"(?:\s+in\s+(?P<file>\S+?)(?::(?P<line>\d+))?)?\s*$"
)
# Searched, not matched from a lazy function: `^(?P<func>.+?)\s+in\s+…` ran `\s+` from every blank of a
# long run to its end (0.65 s for a site of 16 000 characters). The lookbehind starts a try only at a
# run's first blank; the function is what comes before the match.
_NO_OFFSET_SITE = re.compile(r"(?<!\s)\s+in\s+(?P<file>\S+?):(?P<line>\d+)\s*$")
# cuda-memcheck and early compute-sanitizer: address first, function (if any) last.
_OLD_SITE = re.compile(
    r"^(?P<off>0x[0-9a-fA-F]+)\s+in\s+(?P<file>[^:\s]+):(?P<line>\d+)(?::(?P<func>.+))?\s*$"
)


@functools.lru_cache(maxsize=4096)
def parse_site(text: str) -> Frame:
    """Parse what follows ``at`` / ``Device Frame:`` into a Frame.

    Accepts ``K(...)+0x15b50 in f.cuh:1538`` (current), ``K(...)+0x15b50``
    (no ``-lineinfo``), ``0x15b50 in f.cuh:1538`` and
    ``0xc8 in f.cuh:75:K(...)`` (older tool versions).

    Memoised: a report repeats a few sites thousands of times (one per thread and block),
    and splitting a template signature was most of the time of reading one. A Frame is
    frozen, so one may be shared.
    """
    text = text.strip()
    m = _OLD_SITE.match(text)
    if m:
        func = (m.group("func") or "").strip()
        return _frame(func, m.group("file"), m.group("line"), m.group("off"))
    m = _NEW_SITE.match(text)
    if m:
        return _frame(m.group("func"), m.group("file"), m.group("line"), "+" + m.group("off"))
    m = _NO_OFFSET_SITE.search(text, 1)
    if m:
        return _frame(text[: m.start()], m.group("file"), m.group("line"), None)
    return _frame(text, None, None, None)


def _frame(func: str, file: str | None, line: str | None, offset: str | None) -> Frame:
    func = func.strip()
    name, args = split_signature(func) if func else (None, ())
    return Frame(
        function=func, kernel_name=name or None, file=file, line=to_int(line), offset=offset, template_args=args
    )


# --------------------------------------------------------------------- headers

_INVALID_ACCESS = re.compile(
    r"^Invalid (?:__\w+__ )?(?P<op>read|write|atomic)\b.*?of size", re.IGNORECASE
)
_RACE_NEW = re.compile(
    r"^(?P<sev>Error|Warning|Info):\s+Race reported between (?P<acc>\w+) access at (?P<site>.+)$",
    re.IGNORECASE,
)
# The rest of the line, whole: only its `in block (x, y, z)` is read. `(?P<where>.+?)\s*:?\s*$` cost
# 2.5 s for one line of 1000 blanks and 148 s for 4000, cubic (tests/parse/test_parsers_linear.py).
_RACE_OLD = re.compile(
    r"^(?P<sev>Error|Warning|Info):\s+Potential \w+ hazard detected at (?P<where>.+)$",
    re.IGNORECASE,
)
_THREAD_BLOCK = re.compile(
    r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)\s+in block\s+\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)"
)
_IN_BLOCK = re.compile(r"in block \(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_RACE_THREAD = re.compile(r"^(?:Read|Write|Atomic)\s+Thread\s+\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)\s+at\s+(?P<site>.+)$")
# A site, then perhaps a hazard count. Cut apart in two steps, as `_site` does: a lazy site before an
# optional `\s+[N hazards]\s*$` tried each blank of a long run against every later one (0.35 s for a
# 16 000-character line, tests/parse/test_parsers_linear.py).
_RACE_PEER = re.compile(r"^and (?:\w+) access at (?P<site>.*\S)")
_HAZARD_COUNT = re.compile(r"(?<=\s)\[(?P<n>[\d,]+) hazards?\]\s*$")

# Hardware exceptions and other one-line headers, by the words they start with.
HOST_API_KIND = "host-api-access"
HOST_API_NAME_MAX = 80
_HOST_API_BY = re.compile(r"\bon access by (?P<api>\S+(?: (?:source|destination))?)")
_HEADER_WORDS = (
    ("Barrier error detected", None),
    # memcheck and initcheck checking a host API call's access to device memory (a cudaMemcpy of
    # memory nothing wrote, for one): no kernel, no source line; the next line names the call.
    ("Host API memory access error", HOST_API_KIND),
    ("Uninitialized __", "uninitialized-access"),
    ("Program hit ", "api-error"),
    ("Cuda API error detected", "api-error"),
    ("Misaligned ", "misaligned-access"),
    ("Warp Misaligned", "misaligned-access"),
    ("Lane Misaligned", "misaligned-access"),
    ("Out-of-range ", "out-of-bounds"),
    ("Warp Out-of-range", "out-of-bounds"),
    ("Lane Out-of-range", "out-of-bounds"),
    ("Warp Illegal Address", "out-of-bounds"),
    ("Lane Illegal Address", "out-of-bounds"),
    ("Illegal Address", "out-of-bounds"),
    ("Warp Illegal Instruction", "other"),
    ("Warp Assert", "other"),
    ("Warp Hardware Stack Overflow", "other"),
    ("Lane User Stack Overflow", "other"),
    ("Malloc/Free error", "other"),
    ("Invalid __global__ free", "other"),
    ("Unused memory in allocation", "other"),
    ("Leaked ", "other"),
)


# Words that start a block's continuation lines and never a header or a status line.
_CONTINUATIONS = ("at ", "by thread", "Device Frame:", "Host Frame:")


def classify_header(payload: str) -> tuple[str, str | None] | None:
    """Kind and severity of a line that opens an error block, None otherwise."""
    m = _RACE_NEW.match(payload) or _RACE_OLD.match(payload)
    if m:
        return "race-hazard", m.group("sev").lower()
    m = _INVALID_ACCESS.match(payload)
    if m:
        return ("invalid-read" if m.group("op").lower() == "read" else "invalid-write"), None
    for words, kind in _HEADER_WORDS:
        if payload.startswith(words):
            if kind is None:
                kind = "barrier-divergence" if "Divergent" in payload else "other"
            return kind, None
    return None


def detect_tool(payload: str) -> str | None:
    """Name the tool from one marker line's words, None when they do not tell."""
    if "RACECHECK SUMMARY" in payload or "Race reported" in payload or " hazard detected" in payload:
        return "racecheck"
    if payload.startswith("Barrier error") or "SYNCCHECK" in payload:
        return "synccheck"
    if payload.startswith(("Uninitialized __", "Unused memory in allocation")):
        return "initcheck"
    if payload.startswith(("Invalid __", "LEAK SUMMARY", "Leaked ")):
        return "memcheck"
    return None


# ---------------------------------------------------------------------- blocks


def _split_hazards(text: str) -> tuple[str, int | None]:
    """A site's text without its trailing `[N hazards]`, and N (None where the line has no count)."""
    m = _HAZARD_COUNT.search(text)
    if m is None:
        return text, None
    return text[: m.start()].rstrip(), to_int(m.group("n"))


@dataclass
class _Block:
    """A finding being read; mutable until its block ends."""

    kind: str
    severity: str | None
    message: str
    line_no: int
    raw: list[str] = field(default_factory=list)
    site: Frame | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    frames: list[Frame] = field(default_factory=list)
    peers: list[Frame] = field(default_factory=list)
    host: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    hazards: int | None = None

    def add(self, text: str) -> None:
        """Take one continuation line of the block."""
        self.raw.append(text)
        if text.startswith("at "):
            self._site(text[3:])
        elif text.startswith("by thread"):
            self._thread_block(text)
        elif text.startswith("Device Frame:"):
            self.frames.append(parse_site(text[len("Device Frame:") :]))
        elif text.startswith("Host Frame:"):
            self.host.append(text[len("Host Frame:") :].strip())
        elif text.startswith("in ") and self.host:
            self.host[-1] = f"{self.host[-1]} {text}"
        elif text.startswith("Address ") or (text.startswith("and is ") and self.detail):
            self.detail.append(text)
        elif self.kind == HOST_API_KIND:
            self.detail.append(text)
        else:
            self._race_line(text)

    def _site(self, text: str) -> None:
        text, hazards = _split_hazards(text)
        if hazards is not None:
            self.hazards = hazards
        if self.site is None:
            self.site = parse_site(text)
        else:
            self.peers.append(parse_site(text))

    def _thread_block(self, text: str) -> None:
        m = _THREAD_BLOCK.search(text)
        if m:
            nums = tuple(int(g) for g in m.groups())
            self.thread, self.block = nums[:3], nums[3:]

    def _race_line(self, text: str) -> None:
        m = _RACE_PEER.match(text)
        if m:
            site, hazards = _split_hazards(m.group("site"))
            self.peers.append(parse_site(site))
            if hazards is not None:
                # A read racing with several writes prints one "and ... access" line per write, each with
                # its own count (an H100's FLASH_ATTN_EXT record: six, 3840 to 32512 hazards): the
                # record stands for all of them.
                self.hazards = (self.hazards or 0) + hazards
            return
        m = _RACE_THREAD.match(text)
        if m:
            thread = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            site = parse_site(m.group("site"))
            if self.site is None:
                self.site, self.thread = site, thread
            else:
                self.peers.append(site)

    def finish(self, tool: str | None) -> SanitizerFinding:
        site = self.site
        return SanitizerFinding(
            tool=tool,
            kind=self.kind,
            message=self.message,
            kernel=(site.function or None) if site else None,
            kernel_name=site.kernel_name if site else None,
            template_args=site.template_args if site else (),
            file=site.file if site else None,
            line=site.line if site else None,
            offset=site.offset if site else None,
            thread=self.thread,
            block=self.block,
            device_frames=tuple(self.frames),
            raw_lines=tuple(self.raw),
            severity=self.severity,
            hazards=self.hazards,
            peers=tuple(self.peers),
            detail=" ".join(self.detail) or None,
            host_frames=tuple(self.host),
            line_no=self.line_no,
        )


def _open_block(payload: str, kind: str, severity: str | None, line_no: int) -> _Block:
    """Start a block; race headers carry the first access site on the header line."""
    block = _Block(kind=kind, severity=severity, message=payload, line_no=line_no, raw=[payload])
    m = _RACE_NEW.match(payload)
    if m:
        block._site(m.group("site"))
    m = _RACE_OLD.match(payload)
    if m:
        b = _IN_BLOCK.search(m.group("where"))
        if b:
            block.block = tuple(int(g) for g in b.groups())
    return block


def _refine_kind(block: _Block) -> None:
    """An invalid access whose address is misaligned is a misaligned access.

    memcheck prints the same ``Invalid __global__ write`` header for both;
    only the ``Address ... is misaligned`` line tells them apart, and the two
    mean different bugs (bad pointer arithmetic vs bad cast).
    """
    if block.kind in ("invalid-read", "invalid-write"):
        if any("is misaligned" in d for d in block.detail):
            block.kind = "misaligned-access"


# ---------------------------------------------------------------------- report

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([\d,]+)\s+errors?\b(?P<rest>.*)$")
_RACE_SUMMARY = re.compile(
    r"RACECHECK SUMMARY:\s*([\d,]+)\s+hazards?\s+displayed\s*\(\s*([\d,]+)\s+errors?,\s*([\d,]+)\s+warnings?\s*\)"
)
_TOOL_ERROR = re.compile(
    r"^(?:Error|ERROR|Internal Sanitizer Error|Fatal)\b:?\s*|^(?:Unable to|unable to|Could not|Failed to)\b"
)


def _marker_regex(prefix: str) -> re.Pattern[str]:
    """The marker, exactly: nine '=' in a row, not part of a longer rule of '='."""
    esc = re.escape(prefix)
    if set(prefix) == {"="}:
        return re.compile(rf"(?<!=){esc}(?!=)")
    return re.compile(esc)


class ReportReader:
    """Single-pass state machine: one open block at most, findings appended (or, with
    ``on_block``, handed over as each block ends and not kept: kvdiag.parse.sanitizer_digest)."""

    def __init__(self, tool: str | None, prefix: str, on_block: Callable[[_Block], None] | None = None) -> None:
        self.tool = tool
        self.on_block = on_block
        self.detected: str | None = None
        self.marker = _marker_regex(prefix)
        self.block: _Block | None = None
        self.blocks: list[_Block] = []
        self.error_count: int | None = None
        self.not_printed: int | None = None
        self.racecheck: RacecheckSummary | None = None
        self.summary: list[str] = []
        self.target_error = False
        self.process_failed = False
        self.tool_errors: list[str] = []
        self.banner = False

    def feed(self, line: str, line_no: int) -> None:
        m = self.marker.search(line)
        if m is None:
            return  # the target's own output
        payload = line[m.end() :].strip()
        if self.detected is None:
            self.detected = detect_tool(payload)
        if not payload:
            self._close()
            return
        if self.block is not None and payload.startswith(_CONTINUATIONS):
            self.block.add(payload)     # no header or status line starts so: most lines of a big report
            return
        header = classify_header(payload)
        if header is not None:
            self._close()
            self.block = _open_block(payload, header[0], header[1], line_no)
        elif not self._status(payload) and self.block is not None:
            self.block.add(payload)

    def _status(self, payload: str) -> bool:
        """Handle the tool's own status and summary lines; True when consumed."""
        if payload == "COMPUTE-SANITIZER" or payload == "CUDA-MEMCHECK":
            self.banner = True
            return True
        if "SUMMARY:" in payload:
            self._close()
            self._summary(payload)
            return True
        if payload.startswith("Target application returned an error"):
            self._close()
            self.target_error = True
            return True
        if "process didn't terminate successfully" in payload:
            self._close()
            self.process_failed = True
            return True
        if self.block is None and (_TOOL_ERROR.match(payload) or "Target application terminated" in payload):
            self.tool_errors.append(payload)
            return True
        return False

    def _summary(self, payload: str) -> None:
        self.summary.append(payload)
        m = _ERROR_SUMMARY.search(payload)
        if m:
            count = to_int(m.group(1))
            if "not printed" in m.group("rest"):
                self.not_printed = count
            elif self.error_count is None:
                self.error_count = count
            return
        m = _RACE_SUMMARY.search(payload)
        if m:
            self.racecheck = RacecheckSummary(*(to_int(g) or 0 for g in m.groups()))

    def _close(self) -> None:
        if self.block is not None:
            _refine_kind(self.block)
            if self.on_block is not None:
                self.on_block(self.block)
            else:
                self.blocks.append(self.block)
            self.block = None

    def finding_tool(self, kind: str) -> str | None:
        """The tool a finding of ``kind`` is credited to, as far as the lines read so far tell
        (None: only the rest of the report can tell, or nothing will)."""
        return self.tool or _KIND_TOOL.get(kind) or self.detected

    def result(self) -> SanitizerReport:
        self._close()
        report_tool = self.tool or self.detected
        findings = tuple(b.finish(self.tool or _KIND_TOOL.get(b.kind) or report_tool) for b in self.blocks)
        return SanitizerReport(
            tool=report_tool,
            findings=findings,
            sites=fold_sites(findings),
            error_count=self.error_count,
            not_printed=self.not_printed,
            racecheck=self.racecheck,
            summary_lines=tuple(self.summary),
            target_error=self.target_error,
            process_failed=self.process_failed,
            tool_errors=tuple(self.tool_errors),
            banner=self.banner,
        )


def check_tool(tool: str | None) -> None:
    if tool is not None and tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}; expected one of {', '.join(TOOLS)}")


def parse_sanitizer_lines(
    lines: Iterable[str], tool: str | None = None, prefix: str = MARKER
) -> SanitizerReport:
    """Parse compute-sanitizer output given as lines (a file object works).

    ``tool`` names the tool when the caller knows it (it launched it); when
    None the tool is inferred from the text and may stay None (a clean
    memcheck log only says ``ERROR SUMMARY: 0 errors``). ``prefix`` is the
    tool's ``--prefix`` if one was set.
    """
    check_tool(tool)
    parser = ReportReader(tool, prefix)
    for line_no, line in enumerate(iter_lines(lines), start=1):
        parser.feed(line, line_no)
    return parser.result()


def parse_sanitizer(text: str, tool: str | None = None, prefix: str = MARKER) -> SanitizerReport:
    """Parse compute-sanitizer output held in one string; see parse_sanitizer_lines."""
    return parse_sanitizer_lines(iter_lines(text), tool=tool, prefix=prefix)


def fold_sites(findings: Iterable[SanitizerFinding]) -> tuple[SanitizerSite, ...]:
    """Group findings into sites, most frequent first (ties: first seen first)."""
    groups: dict[tuple, list] = {}
    for f in findings:
        key = (f.tool, f.kind, f.kernel, f.file, f.line, f.offset if f.line is None else None)
        entry = groups.setdefault(key, [f, 0, set()])
        entry[1] += 1
        if f.block is not None:
            entry[2].add(f.block)
    sites = [
        SanitizerSite(
            tool=first.tool,
            kind=first.kind,
            kernel=first.kernel,
            kernel_name=first.kernel_name,
            template_args=first.template_args,
            file=first.file,
            line=first.line,
            offset=first.offset if first.line is None else None,
            count=count,
            blocks=len(blocks),
            first=first,
        )
        for first, count, blocks in groups.values()
    ]
    sites.sort(key=lambda s: -s.count)  # stable: ties keep first-seen order
    return tuple(sites)


def instantiations(report: SanitizerReport, include_frames: bool = True) -> tuple[str, ...]:
    """Distinct kernel instantiations (``name<args>``) named by the report, first seen first.

    The reporting kernel of each finding comes first; with ``include_frames``
    the device frames' kernels (e.g. the ``__global__`` caller of a
    ``__device__`` tile function) are added too.
    """
    seen: dict[str, None] = {}
    for f in report.findings:
        if f.instantiation:
            seen.setdefault(f.instantiation, None)
        if include_frames:
            for frame in f.device_frames:
                if frame.instantiation:
                    seen.setdefault(frame.instantiation, None)
    return tuple(seen)


def site_label(site: SanitizerSite | SanitizerFinding) -> str:
    """``fattn-mma-f16.cuh:1538`` (basename:line), or the offset when there is no line."""
    if site.file and site.line is not None:
        return f"{os.path.basename(site.file)}:{site.line}"
    if site.file:
        return os.path.basename(site.file)
    if site.kind == HOST_API_KIND:
        return host_api_label(site)
    return site.offset or "?"


def host_api_label(site: SanitizerSite | SanitizerFinding) -> str:
    """``host API (cudaMemcpy source)``: what a host API record touched, from its detail line (the call's
    name cut to HOST_API_NAME_MAX characters: the label goes into verdict reasons and report tables)."""
    finding = site.first if isinstance(site, SanitizerSite) else site
    m = _HOST_API_BY.search(finding.detail or "")
    return f"host API ({m.group('api')[:HOST_API_NAME_MAX]})" if m else "host API"
