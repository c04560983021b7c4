"""Reader of ggml's ``test-backend-ops`` console output.

kvdiag runs ``test-backend-ops`` to learn which op cases a build gets wrong (FAIL
with an error metric), which it cannot run (not supported) and where a run died.
The console printer writes each case as ``  OP(params): `` followed by the
status on the same line; colour codes wrap OK/FAIL.

Two things make the raw stream harder than it looks, both seen in recorded runs:

* stdout is a pipe, so it is block-buffered. A case's ``  OP(params): `` is
  flushed explicitly but its ``OK`` is not, and may surface lines later, after
  the stderr lines of an abort (``ggml_abort`` flushes stdout before printing).
  A lone status line while a case waits for one is therefore that case's status.
* compute-sanitizer writes into the same stream, even mid-line, so everything
  from its ``=========`` marker on is not the program's text.

Where the process died mid-case, the last case prefix without a status is the
``running_case``. Note that ggml since the output-printer rework (e.g. commit
d99724f2) prints the prefix only *after* the case computed, so a case that
aborts inside its compute is never named; ``last_case`` and ``finished`` then
say after which case the run stopped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kvdiag.parse.launches import LAUNCH_MARKER as _LAUNCH_MARKER
from kvdiag.parse.text import clean_line, dataclass_dict, iter_lines, split_top_level

# size: the case records, the status-line grammar and the one-pass reader of one program's
# output; each part is read only through the others.
STATUSES = ("OK", "FAIL", "NOT_SUPPORTED", "SUPPORTED", "SKIPPED_LARGE", "INCOMPLETE")

_MARKER = re.compile(r"(?<!=)={9}(?!=)")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class CaseMetric:
    """A printed error measure: ``[FLASH_ATTN_EXT] ERR = 1.71 > 0.005``."""

    name: str
    value: float
    threshold: float
    op: str | None = None

    @property
    def ratio(self) -> float | None:
        """How many times over its threshold the error is (None if not computable)."""
        if self.threshold == 0 or math.isnan(self.value):
            return None
        return self.value / self.threshold

    def to_dict(self) -> dict:
        return dataclass_dict(self)


@dataclass(frozen=True)
class BackendCase:
    """One test case line. ``status`` is one of ``STATUSES``."""

    op: str
    params: str
    status: str
    backend: str | None = None
    metrics: tuple[CaseMetric, ...] = ()
    notes: tuple[str, ...] = ()
    line_no: int | None = None
    status_line_no: int | None = None   # where the status was read (a late status comes lines later)

    @property
    def case_string(self) -> str:
        """``OP(params)``: the exact string ``-o``/``-p`` filters and reports use."""
        return f"{self.op}({self.params})"

    def params_dict(self) -> dict[str, str]:
        return params_dict(self.params)

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data["case_string"] = self.case_string
        return data


@dataclass(frozen=True)
class BackendSummary:
    """What the run printed about one backend (device)."""

    name: str
    index: int | None = None
    total: int | None = None
    description: str | None = None
    memory_total_mb: int | None = None
    memory_free_mb: int | None = None
    skipped: str | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    status: str | None = None

    def to_dict(self) -> dict:
        return dataclass_dict(self)


@dataclass(frozen=True)
class BackendOpsReport:
    """A parsed test-backend-ops run.

    ``overall_ok`` is None when the final verdict line never came (abort,
    kill, timeout): absence of FAIL is then not a pass.
    """

    cases: tuple[BackendCase, ...] = ()
    backends: tuple[BackendSummary, ...] = ()
    device_count: int | None = None
    backends_passed: int | None = None
    backends_total: int | None = None
    overall_ok: bool | None = None
    running_case: BackendCase | None = None
    failing_tests: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)

    @property
    def passed(self) -> int:
        return self.count("OK")

    @property
    def failed(self) -> int:
        return self.count("FAIL")

    @property
    def executed(self) -> int:
        """Cases that ran to a verdict (OK or FAIL)."""
        return self.passed + self.failed

    @property
    def not_supported(self) -> int:
        return self.count("NOT_SUPPORTED")

    @property
    def finished(self) -> bool:
        """The run printed its final verdict, i.e. it was not cut short."""
        return self.overall_ok is not None

    @property
    def last_case(self) -> BackendCase | None:
        return self.cases[-1] if self.cases else None

    @property
    def backend_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.backends)

    def backend(self, name: str) -> BackendSummary | None:
        return next((b for b in self.backends if b.name == name), None)

    def failures(self) -> tuple[BackendCase, ...]:
        return tuple(c for c in self.cases if c.status == "FAIL")

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data["counts"] = {s: self.count(s) for s in STATUSES}
        data["finished"] = self.finished
        return data


@dataclass(frozen=True)
class BackendOpsCapabilities:
    """What a given ``test-backend-ops`` binary accepts, read from its usage text.

    Forks and older builds differ (``--seed``, ``--test-file``, ``-j``); kvdiag
    builds command lines only from options the binary announced.
    """

    has_seed: bool = False
    has_test_file: bool = False
    has_parallel_jobs: bool = False
    modes: tuple[str, ...] = ()
    has_list_ops: bool = False
    has_show_coverage: bool = False
    output_formats: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return dataclass_dict(self)


# ------------------------------------------------------------------ case lines

_CASE = re.compile(r"^  (?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*?)\): ?(?P<rest>.*)$")
# Current ggml compares a case's outputs (printing "[OP] ERR = x > t " for each node
# that fails, or for every node with kvdiag's print-every-case-error probe) BEFORE it
# prints the case's own "  OP(params): " prefix, so the diagnostics lead the line.
# The case after its diagnostics is found at the start of a run of 2+ blanks only (the lookbehind),
# so a line of blanks costs one pass, not one pass per blank (issue 43).
_DIAG_HEAD = re.compile(r"\[[^\]]+\] ")
_CASE_TAIL = re.compile(r"\s{2,}(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*?)\): ?(?P<rest>.*)$")
_CASE_AFTER_BLANKS = re.compile(r"(?<!\s)" + _CASE_TAIL.pattern)
_STATUS_END = (
    (re.compile(r"(?:^|\s)NOT SUPPORTED\s*$"), "NOT_SUPPORTED"),
    (re.compile(r"(?:^|\s)SUPPORTED\s*$"), "SUPPORTED"),
    (re.compile(r"(?:^|\s)OK\s*$"), "OK"),
    (re.compile(r"(?:^|\s)FAIL\s*$"), "FAIL"),
    (re.compile(r"(?:^|\s)not supported(?: \[[^\]]*\])?\s*$"), "NOT_SUPPORTED"),
    (re.compile(r"(?:^|\s)skipping large tensors for speed\s*$"), "SKIPPED_LARGE"),
)
_METRIC = re.compile(
    r"\[(?P<op>[^\]\[]+)\] (?P<name>ERR|NMSE|MAA|MAE|RMSE) = (?P<value>\S+) (?:>|<=) (?P<threshold>\S+)"
)
_NOTE_PATTERNS = (
    re.compile(r"\[[^\]\[]+\] NaN at index \d+ \([^)]*\)"),
    re.compile(r"\[[^\]\[]+\] inf (?:sign )?mismatch: \S+ \S+"),
    re.compile(r"\[[^\]\[]+\] nonfinite gradient at index -?\d+ \([^)]*\)"),
    re.compile(r"sentinel mismatch: \S+"),
    re.compile(r"compare failed"),
    re.compile(r"failed to allocate (?:weight )?tensors(?: \[[^\]]*\])?"),
)


def parse_status(rest: str) -> tuple[str | None, tuple[CaseMetric, ...], tuple[str, ...]]:
    """Split what follows ``OP(params): `` into status, metrics and notes.

    The status is the last word(s); diagnostics printed before it become
    metrics (``ERR``/``NMSE``/``MAA`` with their thresholds) and notes (NaN,
    inf, sentinel, compare, allocation messages). Unrecognised leftovers are
    kept as a note rather than dropped: they are what a human must read.
    """
    status, status_text, diag = _split_status(rest)
    metrics, notes, leftover = _diagnostics(diag)
    if status_text.startswith("not supported ["):
        notes += (status_text,)
    if leftover:
        notes += (leftover,)
    return status, metrics, notes


def _split_status(text: str) -> tuple[str | None, str, str]:
    """(status, the status words as printed, the text before them)."""
    text = text.strip()
    for regex, name in _STATUS_END:
        m = regex.search(text)
        if m:
            return name, text[m.start() :].strip(), text[: m.start()]
    return None, "", text


def _diagnostics(diag: str) -> tuple[tuple[CaseMetric, ...], tuple[str, ...], str]:
    """(metrics, known notes, unrecognised leftover text) of a diagnostics prefix."""
    metrics = tuple(_metric(m) for m in _METRIC.finditer(diag))
    diag = _METRIC.sub(" ", diag)
    notes: list[str] = []
    for regex in _NOTE_PATTERNS:
        notes.extend(m.group(0) for m in regex.finditer(diag))
        diag = regex.sub(" ", diag)
    return metrics, tuple(notes), " ".join(diag.split())


def _metric(m: re.Match[str]) -> CaseMetric:
    return CaseMetric(
        name=m.group("name"), value=_float(m.group("value")), threshold=_float(m.group("threshold")), op=m.group("op")
    )


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def params_dict(case: BackendCase | str) -> dict[str, str]:
    """``hsk=256,nr23=[4,1],permute=[0,1,2,3]`` -> ``{"hsk": "256", "nr23": "[4,1]", ...}``.

    Values stay strings exactly as printed so that a case string rebuilt from
    the dict matches the binary's ``-p`` filter byte for byte.
    """
    params = case.params if isinstance(case, BackendCase) else case
    out: dict[str, str] = {}
    for part in split_top_level(params):
        if not part:
            continue
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------------- parser

_TESTING = re.compile(r"^Testing (\d+) devices?")
_BACKEND = re.compile(r"^Backend (\d+)/(\d+): (.*\S|\s)\s*$")   # not (.+?)\s*$: one pass
_DESCRIPTION = re.compile(r"^  Device description: (.*)$")
_MEMORY = re.compile(r"^  Device memory: (\d+) MB \((\d+) MB free\)")
_SKIPPING = re.compile(r"^  (Skipping\b(?:.*\S)?)\s*$")
_TESTS_PASSED = re.compile(r"^  (\d+)/(\d+) tests passed")
_BACKEND_STATUS = re.compile(r"^  Backend (\S+): ?(.*)$")
_BACKENDS_PASSED = re.compile(r"^(\d+)/(\d+) backends passed")
_FAILING_NAME = re.compile(r"^  [A-Z][A-Z0-9_]*\(.*\)\s*$")
_BARE_STATUS = re.compile(r"^\s*(OK|FAIL)\s*$")
_ERROR_LINE = re.compile(r"(Error in \S+: .*|failed to allocate .*|Failed to initialize .*)$")
# "<who>: ggml_backend_graph_compute failed…": found by its words, then <who> read back to the blank
# before it; a search led by \S+ would scan to the line's end from every position (issue 43).
_COMPUTE_FAILED = ": ggml_backend_graph_compute failed"


@dataclass
class _State:
    """Mutable parse state; becomes a BackendOpsReport at the end."""

    cases: list[BackendCase] = field(default_factory=list)
    backends: list[BackendSummary] = field(default_factory=list)
    pending: BackendCase | None = None
    device_count: int | None = None
    backends_passed: int | None = None
    backends_total: int | None = None
    overall_ok: bool | None = None
    expect_overall: bool = False
    in_failing: bool = False
    failing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def backend_name(self) -> str | None:
        return self.backends[-1].name if self.backends else None

    def update_backend(self, **changes) -> None:
        if self.backends:
            self.backends[-1] = replace(self.backends[-1], **changes)

    def close_pending(self, note: str) -> None:
        """A new case or a summary came before the pending case's status."""
        if self.pending is not None:
            self.cases.append(replace(self.pending, notes=self.pending.notes + (note,)))
            self.pending = None


def _program_text(line: str) -> str | None:
    """The target's part of a line: text before a sanitizer marker or a launch probe's line
    (``kvdiag-launch: …``, kvdiag.parse.launches); None if nothing."""
    if line.startswith("=========") and not line.startswith("=", 9):
        return None     # the sanitizer's own line, from its start: most lines of a sanitized batch
    m = _MARKER.search(line)
    end = m.start() if m is not None else len(line)
    launch = line.find(_LAUNCH_MARKER, 0, end)
    if launch >= 0:
        end = launch
    if end == len(line):
        return line
    before = line[:end]
    return before if before.strip() else None


def _feed(state: _State, line: str, line_no: int) -> None:
    text = _program_text(line)
    if text is None:
        return
    if state.in_failing:
        if _FAILING_NAME.match(text):
            state.failing.append(text.strip())
            return
        state.in_failing = False
    for handler in _HANDLERS:
        if handler(state, text, line_no):
            return


def _on_case(state: _State, text: str, line_no: int) -> bool:
    m = _CASE.match(text)
    lead_metrics: tuple[CaseMetric, ...] = ()
    lead_notes: tuple[str, ...] = ()
    if not m:
        m = _case_after_diagnostics(text)
        if not m:
            return False
        lead_metrics, lead_notes, _ = _diagnostics(text[:m.start()] + " ")
    state.close_pending("no status printed")
    status, metrics, notes = parse_status(m.group("rest"))
    metrics, notes = lead_metrics + metrics, lead_notes + notes
    case = BackendCase(
        op=m.group("op"),
        params=m.group("params"),
        status=status or "INCOMPLETE",
        backend=state.backend_name,
        metrics=metrics,
        notes=notes,
        line_no=line_no,
        status_line_no=line_no if status is not None else None,
    )
    if status is None:
        state.pending = case
    else:
        state.cases.append(case)
    return True


def _case_after_diagnostics(text: str) -> re.Match[str] | None:
    """``[OP] ERR = … > …  OP(params): status``: the case's match, starting at its blanks."""
    head = _DIAG_HEAD.match(text)
    if head is None:
        return None
    return _CASE_TAIL.match(text, head.end()) or _CASE_AFTER_BLANKS.search(text, head.end())


def _on_late_status(state: _State, text: str, line_no: int) -> bool:
    """A status that surfaced on its own line belongs to the waiting case.

    Only a line made of status words and known diagnostics qualifies, so that
    an unrelated stderr line ending in "OK" cannot complete a case.
    """
    if state.pending is None:
        return False
    status, status_text, diag = _split_status(text)
    metrics, notes, leftover = _diagnostics(diag)
    if status is None or leftover:
        return False
    if status_text.startswith("not supported ["):
        notes += (status_text,)
    case = state.pending
    state.cases.append(
        replace(
            case,
            status=status,
            metrics=case.metrics + metrics,
            notes=case.notes + notes + (f"status printed late, on line {line_no}",),
            status_line_no=line_no,
        )
    )
    state.pending = None
    return True


def _on_overall(state: _State, text: str, line_no: int) -> bool:
    m = _BARE_STATUS.match(text)
    if not m or not state.expect_overall:
        return False
    state.overall_ok = m.group(1) == "OK"
    state.expect_overall = False
    return True


def _on_structure(state: _State, text: str, line_no: int) -> bool:
    """Headers and summaries: devices, backends, pass counts, failing list."""
    if m := _TESTING.match(text):
        state.device_count = int(m.group(1))
    elif m := _BACKEND.match(text):
        state.close_pending("no status printed")
        state.backends.append(BackendSummary(name=m.group(3), index=int(m.group(1)), total=int(m.group(2))))
    elif m := _DESCRIPTION.match(text):
        state.update_backend(description=m.group(1).strip())
    elif m := _MEMORY.match(text):
        state.update_backend(memory_total_mb=int(m.group(1)), memory_free_mb=int(m.group(2)))
    elif m := _TESTS_PASSED.match(text):
        state.close_pending("no status printed")
        state.update_backend(tests_passed=int(m.group(1)), tests_total=int(m.group(2)))
    elif m := _BACKEND_STATUS.match(text):
        status = parse_status(m.group(2))[0]
        state.update_backend(status=status if status in ("OK", "FAIL") else None)
    elif m := _BACKENDS_PASSED.match(text):
        state.close_pending("no status printed")
        state.backends_passed, state.backends_total = int(m.group(1)), int(m.group(2))
        state.expect_overall = True
    elif text.strip() == "Failing tests:":
        state.in_failing = True
    elif (m := _SKIPPING.match(text)) and state.backends and not state.backends[-1].skipped:
        state.update_backend(skipped=m.group(1))
    else:
        return False
    return True


def _on_error(state: _State, text: str, line_no: int) -> bool:
    error = _error_text(text.strip())
    if error is None:
        return False
    state.errors.append(error)
    return True


def _error_text(text: str) -> str | None:
    """The leftmost error message on a line, from where it starts to the line's end."""
    starts = []
    if m := _ERROR_LINE.search(text):
        starts.append(m.start())
    failed = text.find(_COMPUTE_FAILED)
    if failed > 0 and not text[failed - 1].isspace():
        starts.append(_token_start(text, failed))
    return text[min(starts):].strip() if starts else None


def _token_start(text: str, end: int) -> int:
    """Where the run of non-blank characters that ends at ``end`` starts."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return start


_HANDLERS = (_on_case, _on_structure, _on_late_status, _on_overall, _on_error)


def parse_backend_ops_lines(lines: Iterable[str]) -> BackendOpsReport:
    """Parse test-backend-ops output given as lines (an open file works)."""
    reader = BackendOpsReader()
    for line in lines:
        reader.feed(line)
    return reader.result()


class BackendOpsReader:
    """The same reader fed one line at a time, for a pass over a big log that several readers share."""

    def __init__(self) -> None:
        self.state = _State()
        self.line_no = 0

    def feed(self, line: str) -> None:
        self.feed_clean(clean_line(line))

    def feed_clean(self, line: str) -> None:
        """A line clean_line has already cleaned (kvdiag.parse.text.iter_lines gives such lines)."""
        self.line_no += 1
        _feed(self.state, line, self.line_no)

    def result(self) -> BackendOpsReport:
        return _report(self.state)


def _report(state: _State) -> BackendOpsReport:
    running = state.pending
    if running is not None:
        state.cases.append(running)
    return BackendOpsReport(
        cases=tuple(state.cases),
        backends=tuple(state.backends),
        device_count=state.device_count,
        backends_passed=state.backends_passed,
        backends_total=state.backends_total,
        overall_ok=state.overall_ok,
        running_case=running,
        failing_tests=tuple(state.failing),
        errors=tuple(state.errors),
    )


def parse_backend_ops(text: str) -> BackendOpsReport:
    """Parse test-backend-ops output (stdout, or stdout+stderr combined) held in a string."""
    reader = BackendOpsReader()
    for line in iter_lines(text):
        reader.feed_clean(line)
    return reader.result()


# ---------------------------------------------------------------- capabilities

_MODE_LINE = re.compile(r"^\s*-\s+([a-z][a-z_-]*)\s*(?:\(|$)", re.MULTILINE)
_OUTPUT = re.compile(r"--output\s+<([^>]+)>")


def detect_capabilities(help_text: str) -> BackendOpsCapabilities:
    """Read the options a binary supports from its usage text (``--help`` or a bad-arg run)."""
    modes = tuple(dict.fromkeys(_MODE_LINE.findall(help_text)))
    out = _OUTPUT.search(help_text)
    return BackendOpsCapabilities(
        has_seed=re.search(r"--seed\b", help_text) is not None,
        has_test_file=re.search(r"--test-file\b", help_text) is not None,
        has_parallel_jobs=re.search(r"(?<![\w-])-j\b", help_text) is not None,
        modes=modes,
        has_list_ops=re.search(r"--list-ops\b", help_text) is not None,
        has_show_coverage=re.search(r"--show-coverage\b", help_text) is not None,
        output_formats=tuple(p.strip() for p in out.group(1).split("|")) if out else (),
    )
