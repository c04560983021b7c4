"""What happened to one external command: :class:`CommandResult` and its JSON form.

Kept apart from the runner so that readers of recorded runs (the judge, the
store, the server's result) need the record, not the machinery that made it.
The output itself stays in the log files; the record names them.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from pathlib import Path

from kvdiag.proc.logfiles import LogTexts

__all__ = ["CommandResult", "result_dict", "signal_name"]


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class CommandResult(LogTexts):
    """What happened to one command. Its output is in the log files, not in memory."""

    argv: tuple[str, ...]
    returncode: int | None      # exit status when it exited normally; None when killed by a signal
    signal: int | None          # signal number that ended it (ours on timeout/interrupt, or its own)
    timed_out: bool
    interrupted: bool           # Ctrl-C in kvdiag
    duration_s: float
    log_dir: Path
    stdout_path: Path
    stderr_path: Path
    combined_path: Path
    started_at: str             # ISO-8601 UTC
    executable: str = ""        # argv[0] as resolved and executed
    pid: int | None = None
    timeout_s: float | None = None
    survivors: tuple[int, ...] = field(default=())   # pids of the group still alive after SIGKILL (D state)
    quiet_s: float | None = None   # the quiet_timeout, when that is what stopped it
    log_lost: tuple[tuple[str, int], ...] = ()   # (log file, bytes that never reached it): a refused write
    log_error: str | None = None                 # the OS's reason for the first refused log write

    @property
    def ok(self) -> bool:
        """Exited with status 0 by itself (not after our timeout kill or Ctrl-C)."""
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    def describe(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.timed_out:
            if self.quiet_s is not None:
                return (f"timed out: no output for {self.quiet_s:.1f} s, {self.duration_s:.1f} s in all "
                        "(process group killed)")
            t = self.timeout_s if self.timeout_s is not None else self.duration_s
            return f"timed out after {t:.1f} s (process group killed)"
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)} ({self.signal})"
        if self.returncode is not None:
            return f"exit {self.returncode}"
        return "ended with an unknown status"

    def to_dict(self) -> dict:
        return result_dict(self)


def result_dict(result) -> dict:
    """A process result as JSON data, paths relative to the run directory (shared by the
    runner's CommandResult and the server executor's ServerResult)."""
    base = result.log_dir.parent
    return {
        "argv": list(result.argv),
        "executable": result.executable,
        "pid": result.pid,
        "returncode": result.returncode,
        "signal": result.signal,
        "signal_name": signal_name(result.signal) if result.signal is not None else None,
        "timed_out": result.timed_out,
        "interrupted": result.interrupted,
        "timeout_s": result.timeout_s,
        "duration_s": round(result.duration_s, 3),
        "started_at": result.started_at,
        "ok": result.ok,
        "description": result.describe(),
        "survivors": list(result.survivors),
        "log_dir": _rel(result.log_dir, base),
        "stdout_path": _rel(result.stdout_path, base),
        "stderr_path": _rel(result.stderr_path, base),
        "combined_path": _rel(result.combined_path, base),
        **({"log_lost": dict(result.log_lost), "log_error": result.log_error} if result.log_cut else {}),
    }
