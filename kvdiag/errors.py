"""Every error kvdiag reports to its user, and the exit code each one means.

The library raises these; only the CLI turns them into one line and an exit
(``kvdiag.cli.main``), reading the code from the error itself, so what a failure
means to the user is decided here, once. Parse helpers that fail on one input
(``MarkerError``, ``ProbeFileError``, ``GGUFError``) stay ``ValueError``s beside
their parsers: their callers turn them into one of these or into a problem line.

Three interruptions stand beside them, none an error: Ctrl-C during a command, during an
attempt of a step and during a run, each carrying what was kept of it.
"""

from __future__ import annotations

import errno
from typing import Any, Sequence

from kvdiag.exitcodes import ExitCode


class KvdiagError(Exception):
    """Base for every error kvdiag reports to its user as one line."""

    exit_code: ExitCode = ExitCode.HARNESS
    prefix: str = ""                 # put before the message on the user's line


class UsageError(KvdiagError):
    """The user asked for something that cannot be done as asked (bad id, bad path)."""

    exit_code = ExitCode.USAGE


class HarnessError(KvdiagError):
    """kvdiag itself failed: a bug, a disk error, an unexpected state."""

    prefix = "internal failure: "


# --------------------------------------------------------------------------- running commands


class CommandError(KvdiagError):
    """A command could not be run as asked (base of the runner's errors)."""


class CommandNotFound(CommandError):
    """The program does not exist, is not a file, or cannot be executed. Nothing was started."""

    @property
    def arguments_too_long(self) -> bool:
        """The kernel refused the command line itself (E2BIG, "Argument list too long": one argument
        over MAX_ARG_STRLEN, or argv and environment over ARG_MAX); the same program with a shorter
        command line starts. The runner's message carries the child's ``[Errno N]`` (kvdiag.proc.runner)."""
        return f"[Errno {errno.E2BIG}]" in str(self)


class CommandInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) while a command ran. The group was killed and the logs written;
    ``.result`` is partial.

    Not an error, so not a :class:`CommandError` nor even an ``Exception``: the user's stop
    is a ``KeyboardInterrupt``, which no ``except CommandError``/``except KvdiagError``/
    ``except Exception`` written for a *failure* can swallow. As a ``CommandError`` it was
    caught by `kvdiag doctor` as "compute-sanitizer cannot be run": each signal ended one
    control, the next one started, and later signals were ignored (issue 28). Only code
    that handles an interruption catches it (``except CommandInterrupted``, or
    ``except KeyboardInterrupt``, which Ctrl-C itself raises everywhere else).
    """

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, result: Any):     # a kvdiag.proc.result.CommandResult
        super().__init__(message)
        self.result = result


class AttemptInterrupted(Exception):
    """Ctrl-C during an attempt of a step (or another thread stopped its run); ``.attempt`` is the
    attempt judged from the partial logs (a kvdiag.records.verdict.Attempt). Raised inside the
    engine's verdict pipeline and caught there: the run records it and raises RunInterrupted."""

    def __init__(self, attempt: Any):
        super().__init__("interrupted")
        self.attempt = attempt


class RunInterrupted(Exception):
    """Ctrl-C during a run; ``.outcome`` is the outcome recorded so far (a kvdiag.records.verdict.Outcome)."""

    def __init__(self, outcome: Any):
        super().__init__("interrupted")
        self.outcome = outcome


class SlotTimeout(KvdiagError):
    """The GPU slots were not free in time. ``.holders`` is [(slot, pid)], ``.pids`` the distinct pids."""

    def __init__(self, message: str, holders: list[tuple[int, int | None]]):
        super().__init__(message)
        self.holders = holders
        self.pids = sorted({pid for _, pid in holders if pid is not None})


class CompileError(KvdiagError):
    """nvcc is missing or failed on a canary."""


class BuildFailed(KvdiagError):
    """Configuring or building a scratch tree failed; carries the tail of its log."""

    def __init__(self, phase: str, result: Any, message: str, tail: Sequence[str] = ()):   # a CommandResult or None
        super().__init__(message)
        self.phase = phase
        self.result = result
        self.tail = tuple(tail)
        self.log = result.combined_path if result is not None else None

    def report(self) -> str:
        lines = [str(self)]
        if self.log is not None:
            lines.append(f"log: {self.log}")
        if self.tail:
            lines.append(f"last {len(self.tail)} line(s):")
            lines.extend(f"  {line}" for line in self.tail)
        return "\n".join(lines)


# --------------------------------------------------------------------------- asked the impossible


class ScanNotRun(KvdiagError):
    """The entry cannot be scanned on this target: carries the verdict that says why."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(reason)
        self.verdict = verdict


class CaseListingFailed(KvdiagError):
    """test-backend-ops could not list an op's cases (it did not start, crashed or exited non-zero
    before printing any): an empty listing from a failed program is not "no case here"."""


class TemplateProblem(UsageError):
    """A step cannot be rendered against this build (a missing binary, variable or env)."""


class ProbeError(UsageError):
    """A probe cannot be used as asked (unknown name, bad file, cycle in `requires`)."""


class StackCycle(ProbeError):
    """The probes' ``requires`` form a cycle."""


class WorktreeError(UsageError):
    """A worktree could not be made or used as asked (bad source, bad commit, path in use)."""


class ArmMismatch(UsageError):
    """A recorded run asked to stand in for `kvdiag verify`'s BEFORE arm (``--before RUN``) is not the
    run verify would make: another entry, build, model, repro, or a run that did not finish. The
    message names what differs; nothing was built or run."""

    prefix = "cannot reuse the BEFORE arm: "


# --------------------------------------------------------------------------- inputs, outputs, the machine


class DataError(KvdiagError):
    """An input file (sweep, run.json, GGUF, log, database) is malformed: one line saying what is wrong."""

    exit_code = ExitCode.DATA


class RunUnreadable(DataError):
    """A run.json that cannot be read: reported as such, never skipped silently for an older run.
    ``.why`` says what is wrong without the path (a listing's row already names the run)."""

    def __init__(self, message: str, why: str | None = None):
        super().__init__(message)
        self.why = why or message


class HistoryUnreadable(DataError):
    """history.sqlite is corrupt or not a database (65 for `history`; a warning for a sweep)."""


class UnsafeTemplate(TemplateProblem):
    """A registry template reached for what the sandbox forbids: nothing ran."""


class OutputRefused(UsageError):
    """The output path names something that is not a regular file: refused, left as it is."""


class WriteFailed(KvdiagError):
    """The OS refused a write (disk full, read-only, permission): the old file is untouched."""


class OutputUnwritable(WriteFailed):
    """The write failed because of the path given (a folder that cannot be made, no permission, a
    read-only file system): the user's to change, so a usage error (64), not kvdiag failing (70)."""

    exit_code = ExitCode.USAGE


class UnsafePath(UsageError):
    """A folder (or a link on the way to one) another user could control: refused, nothing
    written there (kvdiag.trust says what is checked)."""


class UnsafeLockPath(UnsafePath):
    """A lock directory or file another user could control: refused, nothing written."""
