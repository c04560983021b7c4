"""How a program died: ggml aborts and asserts, CUDA errors, C++ exceptions, signals.

A reproduction often ends not with a test verdict but with a death, and the
death is the evidence: ``CUDA error: unspecified launch failure`` raised in
``ggml_cuda_kernel_can_use_pdl`` after a kernel fault, a ``GGML_ASSERT`` at a
known line, a segfault. Registry signatures match on the kind, the file:line,
the function and the backtrace symbols, so all of them are kept.

ggml prints, in this order: the CUDA error block (``ggml_cuda_error``), then
``file:line: message`` from ``ggml_abort``, then a backtrace (glibc
``backtrace_symbols`` lines, or gdb/lldb output when a debugger is installed).
An uncaught C++ exception prints the backtrace *first* (ggml's terminate
handler) and then libstdc++'s ``terminate called after throwing...``.
"""

from __future__ import annotations

import os
import re
import signal as _signal
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kvdiag.parse.text import dataclass_dict, iter_lines, to_int

ABORT_KINDS = ("ggml-abort", "ggml-assert", "cuda-error", "cpp-exception", "signal", "other")


@dataclass(frozen=True)
class AbortInfo:
    """One fatal event found in a program's output.

    ``file`` is the basename (what signatures match), ``path`` the path as
    printed (build-machine specific). ``detail`` is the kind's payload: the
    CUDA error string, the assert expression, the ``what()`` text, the signal
    name. ``statement`` is the CUDA API call ggml echoes after a CUDA error.
    """

    kind: str
    message: str
    file: str | None = None
    path: str | None = None
    line: int | None = None
    function: str | None = None
    detail: str | None = None
    backtrace: tuple[str, ...] = ()
    line_no: int | None = None
    statement: str | None = None
    device: int | None = None

    @property
    def location(self) -> str | None:
        """``ggml-cuda.cu:106``: basename and line, independent of the build directory."""
        if self.file is None:
            return None
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def symbols(self) -> tuple[str, ...]:
        """Function symbols of the backtrace, offsets dropped, empty ones skipped."""
        return tuple(s for s in (backtrace_symbol(b) for b in self.backtrace) if s)

    def mentions(self, needle: str) -> bool:
        """True if ``needle`` occurs in the message, function, detail or backtrace."""
        fields = (self.message, self.function or "", self.detail or "", self.statement or "")
        return any(needle in f for f in fields) or any(needle in b for b in self.backtrace)

    def to_dict(self) -> dict:
        data = dataclass_dict(self)
        data["symbols"] = list(self.symbols)
        data["location"] = self.location
        return data


# ------------------------------------------------------------------- patterns

_SOURCE = r"\S+?\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp|hh|m|mm|metal|comp)"
# A message runs to its last non-blank (`.*\S`), or is one blank: `(?P<msg>.+?)\s*$` extended the
# message a character at a time and ran `\s*` to the end of each blank run (0.85 s for a 16 000-character
# line, tests/parse/test_parsers_linear.py); these read the same group in one pass.
_GGML_ABORT = re.compile(rf"^(?P<path>{_SOURCE}):(?P<line>\d+): (?P<msg>.*\S|\s)\s*$")
_OLD_ASSERT = re.compile(rf"^GGML_ASSERT: (?P<path>{_SOURCE}):(?P<line>\d+): (?P<msg>.*\S|\s)\s*$")
_ASSERT_MSG = re.compile(r"^GGML_ASSERT\((?P<expr>.*)\) failed$")
_GPU_ERROR = re.compile(r"^(?P<api>CUDA|ROCm|MUSA|HIP|SYCL) error: (?P<msg>(?:.*\S)?)\s*$")
_OLD_GPU_ERROR = re.compile(rf"^(?P<api>CUDA|ROCm|HIP) error (?P<code>\d+) at (?P<path>{_SOURCE}):(?P<line>\d+): (?P<msg>(?:.*\S)?)\s*$")
_CURRENT_DEVICE = re.compile(
    rf"^\s*current device: (?P<dev>-?\d+)(?:, in function (?P<func>\S+) at (?P<path>{_SOURCE}):(?P<line>\d+))?"
)
_GPU_ABORT_MSG = re.compile(r"^(?:CUDA|ROCm|MUSA|HIP|SYCL) error$")
_TERMINATE = re.compile(r"^terminate called (?:after throwing an instance of '(?P<type>.+)'|(?P<other>.*\S|\s))\s*$")
_WHAT = re.compile(r"^\s+what\(\):\s+(?P<what>(?:.*\S)?)\s*$")
_SIGNAL_NAMES = {
    "Segmentation fault": "SIGSEGV",
    "Illegal instruction": "SIGILL",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Killed": "SIGKILL",
    "Trace/breakpoint trap": "SIGTRAP",
}
_SIG_WORDS = "|".join(re.escape(w) for w in _SIGNAL_NAMES)
_SIGNAL_ALONE = re.compile(rf"^\s*(?P<name>{_SIG_WORDS})(?: \(core dumped\))?\s*$")
# bash: "bash: line 1: 12345 Segmentation fault      (core dumped) ./prog args"
_SIGNAL_SHELL = re.compile(rf"^.*?: line \d+:\s+\d+\s+(?P<name>{_SIG_WORDS})\b")
_GLIBC_FATAL = re.compile(
    r"^(?:Fatal glibc error: .*|double free or corruption.*|free\(\): .*|malloc\(\): .*"
    r"|munmap_chunk\(\): .*|corrupted size vs\. prev_size.*|\*\*\* stack smashing detected \*\*\*.*)$"
)
_BT_GLIBC = re.compile(r"^(?P<module>[^\s()]+)\((?P<sym>[^()]*)\)\s*\[(?P<addr>0x[0-9a-fA-F]+)\]\s*$")
_BT_GDB = re.compile(r"^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(?P<sym>[^\s(]+)")
_BT_UNWIND = re.compile(r"^\d+: 0x[0-9a-fA-F]+ ?(?P<sym>\S*)\s*$")


def backtrace_symbol(frame: str) -> str | None:
    """``/x/libggml-base.so.0(ggml_abort+0x15b)[0x7f..]`` -> ``ggml_abort``.

    Mangled C++ names stay mangled (``_Z37ggml_cuda_flash_attn_ext_mma_f16_case...``):
    they still contain the readable identifier, and demangling needs a tool.
    """
    for regex in (_BT_GLIBC, _BT_GDB, _BT_UNWIND):
        m = regex.match(frame.strip())
        if m:
            sym = m.group("sym").split("+", 1)[0].strip()
            return sym or None
    return None


def is_backtrace(line: str) -> bool:
    """A backtrace frame as glibc, gdb/lldb or an unwinder prints it."""
    text = line.strip()
    return bool(_BT_GLIBC.match(text) or _BT_GDB.match(text) or _BT_UNWIND.match(text))


# --------------------------------------------------------------------- parser


@dataclass
class _State:
    """Events found so far; the open one receives context and backtrace lines."""

    events: list[AbortInfo] = field(default_factory=list)
    # index of the event whose follow-up lines (device/statement/what) are due
    expecting: str | None = None
    bt_owners: tuple[int, ...] = ()
    orphan_bt: list[str] = field(default_factory=list)

    def add(self, info: AbortInfo, expecting: str | None = None, owns_backtrace: bool = False) -> None:
        self.events.append(info)
        self.expecting = expecting
        if owns_backtrace:
            self.bt_owners = (len(self.events) - 1,) + self._gpu_error_aborted_by(info)
        if info.kind == "cpp-exception" and self.orphan_bt:
            self.amend(backtrace=tuple(self.orphan_bt))
            self.orphan_bt = []

    def _gpu_error_aborted_by(self, info: AbortInfo) -> tuple[int, ...]:
        """The CUDA error this ggml abort reports (ggml_cuda_error calls GGML_ABORT("CUDA error")).

        Both records then share the backtrace, so a signature on either finds it.
        """
        if len(self.events) < 2 or not _GPU_ABORT_MSG.match(info.message):
            return ()
        previous = len(self.events) - 2
        return (previous,) if self.events[previous].kind == "cuda-error" else ()

    def amend(self, index: int | None = None, **changes) -> None:
        i = len(self.events) - 1 if index is None else index
        self.events[i] = replace(self.events[i], **changes)


def _path_fields(path: str | None, line: str | None) -> dict:
    if path is None:
        return {"file": None, "path": None, "line": None}
    return {"file": os.path.basename(path.replace("\\", "/")), "path": path, "line": to_int(line)}


def _on_followup(state: _State, text: str, line_no: int) -> bool:
    """Lines that complete the previous event: CUDA device/statement, what()."""
    expecting, state.expecting = state.expecting, None
    if expecting == "device":
        m = _CURRENT_DEVICE.match(text)
        if m:
            state.amend(device=int(m.group("dev")))
            if m.group("func"):
                state.amend(function=m.group("func"), **_path_fields(m.group("path"), m.group("line")))
            state.expecting = "statement"
            return True
    elif expecting == "statement" and text.startswith("  ") and text.strip():
        state.amend(statement=text.strip())
        return True
    elif expecting == "what":
        m = _WHAT.match(text)
        if m:
            state.amend(detail=m.group("what"))
            return True
    return False


def _on_gpu_error(state: _State, text: str, line_no: int) -> bool:
    m = _GPU_ERROR.match(text)
    if m:
        state.add(AbortInfo(kind="cuda-error", message=text.strip(), detail=m.group("msg"), line_no=line_no), "device")
        return True
    m = _OLD_GPU_ERROR.match(text)
    if m:
        info = AbortInfo(
            kind="cuda-error",
            message=text.strip(),
            detail=m.group("msg"),
            line_no=line_no,
            **_path_fields(m.group("path"), m.group("line")),
        )
        state.add(info, "device")
        return True
    return False


def _on_ggml_abort(state: _State, text: str, line_no: int) -> bool:
    m = _OLD_ASSERT.match(text)
    if m:
        info = AbortInfo(
            kind="ggml-assert", message=text.strip(), detail=m.group("msg"), line_no=line_no,
            **_path_fields(m.group("path"), m.group("line")),
        )
        state.add(info, owns_backtrace=True)
        return True
    m = _GGML_ABORT.match(text)
    if not m:
        return False
    msg = m.group("msg")
    assert_m = _ASSERT_MSG.match(msg)
    info = AbortInfo(
        kind="ggml-assert" if assert_m else "ggml-abort",
        message=msg,
        detail=assert_m.group("expr") if assert_m else msg,
        line_no=line_no,
        **_path_fields(m.group("path"), m.group("line")),
    )
    state.add(info, owns_backtrace=True)
    return True


def _on_exception(state: _State, text: str, line_no: int) -> bool:
    m = _TERMINATE.match(text)
    if not m:
        return False
    info = AbortInfo(kind="cpp-exception", message=text.strip(), function=m.group("type"), line_no=line_no)
    state.add(info, "what" if m.group("type") else None)
    return True


def _on_signal(state: _State, text: str, line_no: int) -> bool:
    m = _SIGNAL_ALONE.match(text) or _SIGNAL_SHELL.match(text)
    if m:
        state.add(AbortInfo(kind="signal", message=text.strip(), detail=_SIGNAL_NAMES[m.group("name")], line_no=line_no))
        return True
    m = _GLIBC_FATAL.match(text.strip())
    if m:
        state.add(AbortInfo(kind="other", message=text.strip(), line_no=line_no))
        return True
    return False


def _on_backtrace(state: _State, text: str, line_no: int) -> bool:
    if not is_backtrace(text):
        return False
    frame = text.strip()
    if state.bt_owners:
        for index in state.bt_owners:
            state.amend(index, backtrace=state.events[index].backtrace + (frame,))
    else:
        state.orphan_bt.append(frame)
    return True


_HANDLERS = (_on_followup, _on_gpu_error, _on_ggml_abort, _on_exception, _on_signal, _on_backtrace)


_CASE_PREFIX = re.compile(r"^  [A-Z][A-Z0-9_]*\(.*?\): ")
_MARKER = re.compile(r"(?<!=)={9}(?!=)")


def _program_text(line: str) -> str:
    """The part of a combined-stream line that a dying program wrote.

    stderr lands mid-line after a test-backend-ops case prefix (stdout) when the
    case dies inside its compute, and compute-sanitizer text after its marker
    is not the program's; both are cut away.
    """
    m = _MARKER.search(line)
    if m:
        line = line[: m.start()]
    m = _CASE_PREFIX.match(line)
    return line[m.end() :] if m else line


def parse_aborts_lines(lines: Iterable[str]) -> tuple[AbortInfo, ...]:
    """Find fatal events in output given as lines (stderr, or a combined stream)."""
    state = _State()
    for line_no, raw in enumerate(iter_lines(lines), start=1):
        line = _program_text(raw)
        for handler in _HANDLERS:
            if handler(state, line, line_no):
                break
    return tuple(state.events)


def parse_aborts(text: str) -> tuple[AbortInfo, ...]:
    """Find fatal events in output held in one string, in the order printed."""
    return parse_aborts_lines(iter_lines(text))


# ---------------------------------------------------------------- exit status


def signal_from_returncode(returncode: int | None, shell: bool = False) -> int | None:
    """The signal that killed a process, from its return code, if it says so.

    Python's subprocess reports death by signal n as ``-n``. A shell (and tools
    that wrap the target, such as ``bash -c``) exits with ``128 + n`` instead;
    that is only a signal when the caller knows a shell was in between, hence
    ``shell``: a program may exit 134 on its own.
    """
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if shell and 128 < returncode <= 128 + 64:
        return returncode - 128
    return None


def signal_name(number: int) -> str:
    """``6`` -> ``SIGABRT``; unknown numbers -> ``SIG<n>``."""
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def describe_exit(returncode: int | None, signal: int | None = None, shell: bool = False) -> str:
    """One phrase for a report: ``exit 134``, ``killed by SIGABRT (6)``, ``no exit status``."""
    sig = signal if signal is not None else signal_from_returncode(returncode, shell=shell)
    if sig is not None:
        return f"killed by {signal_name(sig)} ({sig})"
    if returncode is None:
        return "no exit status"
    return f"exit {returncode}"
