"""The one subprocess layer: every external command goes through :func:`run_command`.

* :mod:`kvdiag.proc.runner` -- run_command and its result (logs on disk, process group
  killed on timeout or Ctrl-C).
* :mod:`kvdiag.proc.slots` -- the GPU slot pool shared by concurrent kvdiag processes.
* :mod:`kvdiag.proc.sanitizer` -- a compute-sanitizer invocation, finding the binary.
"""

from kvdiag.proc.runner import (
    CommandError,
    CommandInterrupted,
    CommandNotFound,
    CommandResult,
    resolve_program,
    run_command,
)
from kvdiag.proc.sanitizer import (
    SANITIZER_ERROR_EXITCODE,
    SANITIZER_TOOLS,
    SanitizerInvocation,
    find_sanitizer,
    parse_sanitizer_version,
    sanitizer_version,
)
from kvdiag.proc.slots import (
    Lease,
    SlotPool,
    SlotTimeout,
    default_lock_root,
    slots_for_memory,
)

__all__ = [
    "CommandError",
    "CommandInterrupted",
    "CommandNotFound",
    "CommandResult",
    "resolve_program",
    "run_command",
    "SANITIZER_ERROR_EXITCODE",
    "SANITIZER_TOOLS",
    "SanitizerInvocation",
    "find_sanitizer",
    "parse_sanitizer_version",
    "sanitizer_version",
    "Lease",
    "SlotPool",
    "SlotTimeout",
    "default_lock_root",
    "slots_for_memory",
]
