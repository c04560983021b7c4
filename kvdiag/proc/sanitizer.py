"""Building a compute-sanitizer invocation, finding the binary, reading its version.

The process itself is run through :func:`kvdiag.proc.runner.run_command`, like every
other command. Option semantics below follow NVIDIA's Compute Sanitizer manual
(the copy shipped in the ``nvidia-cuda-sanitizer-api`` wheel):

* ``--log-file F`` keeps the tool's report apart from the program's stdout. In
  that file name ``%`` starts an escape sequence (``%p`` = pid, ``%q{VAR}``), so a
  literal ``%`` in our path is written as ``%%``.
* ``--error-exitcode N`` is the exit status when the tool found errors (the manual:
  "if the original application succeeded"; on an H200 also when the program itself
  failed, see docs/performance.md). Its default 0 would hide a finding, hence
  :data:`SANITIZER_ERROR_EXITCODE`.
* ``--kernel-name kns=SUBSTRING`` checks only kernels whose **mangled** name
  contains SUBSTRING (``kne=`` would be the complete mangled name). A plain C/C++
  identifier such as ``mul_mat_q`` appears verbatim in the mangled name; namespace
  qualifiers, template arguments or spaces do not, so they are refused here, as is
  ``,`` (the separator of filter components).
* ``--print-limit N`` (0 = unlimited; the tool's default is 100),
  ``--launch-timeout N`` (seconds; 0 = wait forever),
  ``--destroy-on-device-error context|kernel``.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import sh

from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.errors import UsageError
from kvdiag.proc.runner import run_command

__all__ = [
    "DESTROY_OPTION",
    "DEVICE_ERROR_TOOLS",
    "SANITIZER_ERROR_EXITCODE",
    "SANITIZER_TOOLS",
    "SanitizerInvocation",
    "find_sanitizer",
    "sanitizer_version",
    "parse_sanitizer_version",
]

SANITIZER_ERROR_EXITCODE = 99
_DESTROY_CHOICES = ("context", "kernel")
DESTROY_OPTION = "--destroy-on-device-error"
# The tools whose findings are device errors, which end the kernel, or by the tool's default the whole
# context; racecheck's hazards never end a kernel.
DEVICE_ERROR_TOOLS = frozenset({"memcheck", "synccheck", "initcheck"})
# Options argv() sets itself; a registry entry passing them again would contradict it.
_RESERVED_OPTIONS = ("--tool", "--log-file", "--error-exitcode")
_MANGLED_CHARS = re.compile(r"^[A-Za-z0-9_.$]+$")
SANITIZER_BINARY = "compute-sanitizer"

# Fixed install locations tried after PATH and $CUDA_HOME (a tuple so tests can swap it).
_SYSTEM_CANDIDATES: tuple[Path, ...] = (Path("/usr/local/cuda/bin/compute-sanitizer"),)


@dataclass(frozen=True)
class SanitizerInvocation:
    tool: str                                   # memcheck | racecheck | synccheck | initcheck
    options: tuple[str, ...] = ()               # extra options from the registry entry
    kernel_filter: str | None = None            # -> --kernel-name kns=<filter> (mangled-name substring)
    print_limit: int | None = None              # -> --print-limit N (0 = unlimited)
    launch_timeout: int | None = None           # -> --launch-timeout N (seconds, 0 = forever)
    destroy_on_device_error: str | None = None  # -> --destroy-on-device-error context|kernel

    def __post_init__(self) -> None:
        if self.tool not in SANITIZER_TOOLS:
            raise ValueError(f"unknown compute-sanitizer tool {self.tool!r}; "
                             f"expected one of {', '.join(SANITIZER_TOOLS)}")
        if isinstance(self.options, (str, bytes)) or not all(isinstance(o, str) for o in self.options):
            raise ValueError("options must be a sequence of str, one argv element each")
        object.__setattr__(self, "options", tuple(self.options))
        for opt in self.options:
            name = opt.split("=", 1)[0]
            if name in _RESERVED_OPTIONS:
                raise ValueError(f"option {name} is set by kvdiag itself; remove it from options")
        if self.kernel_filter is not None:
            if not self.kernel_filter or not _MANGLED_CHARS.match(self.kernel_filter):
                raise ValueError(
                    f"kernel filter {self.kernel_filter!r} cannot match: compute-sanitizer's kns= "
                    "matches a substring of the mangled kernel name, so use a plain identifier "
                    "(letters, digits, _ . $), e.g. 'mul_mat_q'")
        for label, value in (("print_limit", self.print_limit), ("launch_timeout", self.launch_timeout)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{label} must be a non-negative int, not {value!r}")
        if self.destroy_on_device_error is not None and self.destroy_on_device_error not in _DESTROY_CHOICES:
            raise ValueError(f"destroy_on_device_error must be 'context' or 'kernel', "
                             f"not {self.destroy_on_device_error!r}")

    def tool_options(self) -> tuple[str, ...]:
        """The options after the fixed head: typed fields first, then ``options`` as given."""
        out: list[str] = []
        if self.kernel_filter is not None:
            out += ["--kernel-name", f"kns={self.kernel_filter}"]
        if self.print_limit is not None:
            out += ["--print-limit", str(self.print_limit)]
        if self.launch_timeout is not None:
            out += ["--launch-timeout", str(self.launch_timeout)]
        if self.destroy_on_device_error is not None:
            out += [DESTROY_OPTION, self.destroy_on_device_error]
        out += list(self.options)
        return tuple(out)

    def argv(self, sanitizer: Path, log_file: Path | None, program_argv: Sequence[str]) -> tuple[str, ...]:
        """``[sanitizer, --tool, T, --log-file, F, --error-exitcode, 99, *options, *program_argv]``.

        ``log_file`` None leaves the report in the program's own stdout, interleaved with
        what the program prints (a scan batch needs that order to tell cases apart)."""
        prog = [os.fspath(a) for a in program_argv]
        if not prog:
            raise ValueError("program_argv must name the program to check")
        log = ("--log-file", os.fspath(log_file).replace("%", "%%")) if log_file is not None else ()
        return (os.fspath(sanitizer), "--tool", self.tool, *log,
                "--error-exitcode", str(SANITIZER_ERROR_EXITCODE),
                *self.tool_options(), *prog)


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _wheel_candidates(entries: Iterable[str]) -> Iterator[Path]:
    """compute-sanitizer inside an installed ``nvidia-cuda-sanitizer-api*`` wheel.

    Known layouts: ``nvidia/cu13/bin/compute-sanitizer`` (a sh wrapper) next to
    ``nvidia/cu13/compute-sanitizer/compute-sanitizer``, and
    ``nvidia/cuda_sanitizer_api/bin/compute-sanitizer`` (the -cu12 wheel, which
    records that file with mode 644, so pip installs it not executable: it is
    skipped like any non-executable candidate). Nothing is imported.
    """
    patterns = ("*/bin/compute-sanitizer", "*/compute-sanitizer/compute-sanitizer",
                "*/*/bin/compute-sanitizer", "*/*/compute-sanitizer/compute-sanitizer")
    seen: set[Path] = set()
    for entry in entries:
        if not entry:
            continue
        nvidia = Path(entry) / "nvidia"
        try:
            if not nvidia.is_dir():
                continue
        except OSError:
            continue
        for pat in patterns:
            for cand in sorted(nvidia.glob(pat)):
                if cand not in seen:
                    seen.add(cand)
                    yield cand


def find_sanitizer(explicit: Path | None = None) -> Path | None:
    """Where compute-sanitizer is, or None.

    Order: ``explicit``; ``$KVDIAG_COMPUTE_SANITIZER``; ``compute-sanitizer`` on PATH;
    ``$CUDA_HOME/bin``; ``/usr/local/cuda/bin``; an ``nvidia-cuda-sanitizer-api``
    wheel in a ``site-packages`` on ``sys.path``. An explicit path or the variable
    that does not name an executable file is the user's error (:class:`UsageError`),
    never silently replaced by another sanitizer.
    """
    for label, value in (("--sanitizer", explicit),
                         ("KVDIAG_COMPUTE_SANITIZER", os.environ.get("KVDIAG_COMPUTE_SANITIZER") or None)):
        if value is None:
            continue
        p = Path(value).expanduser()
        if p.is_dir():
            p = p / SANITIZER_BINARY
        if not _usable(p):
            raise UsageError(f"{label}: {value} is not an executable compute-sanitizer")
        return p.absolute()
    try:
        return Path(str(sh.Command(SANITIZER_BINARY)))
    except sh.CommandNotFound:
        pass
    candidates: list[Path] = []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        candidates.append(Path(cuda_home) / "bin" / SANITIZER_BINARY)
    candidates.extend(_SYSTEM_CANDIDATES)
    for cand in candidates:
        if _usable(cand):
            return cand
    for cand in _wheel_candidates(sys.path):
        if _usable(cand):
            return cand
    return None


_VERSION_RE = re.compile(r"\bVersion\s+(\d+(?:\.\d+)+)")


def parse_sanitizer_version(text: str) -> str | None:
    """``... Version 2025.3.1.0 (build 36398583) (public-release)`` -> ``2025.3.1.0``."""
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


def sanitizer_version(path: Path, log_dir: Path, *, timeout: float = 60.0) -> str | None:
    """Run ``compute-sanitizer --version`` (through run_command); None if no version is printed."""
    result = run_command([os.fspath(path), "--version"], timeout=timeout, log_dir=log_dir,
                         name="compute-sanitizer-version")
    if result.timed_out:
        return None
    return parse_sanitizer_version(result.combined_text())
