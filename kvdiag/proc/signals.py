"""How a kvdiag process ends when it is told to: SIGINT, SIGTERM, SIGHUP.

Installed once by the CLI entry point (``kvdiag.cli.main`` as a program), never by
a library call, so tests that call ``main([...])`` inside pytest keep pytest's own
handlers.

* SIGTERM and SIGHUP raise :class:`Terminated`, a ``KeyboardInterrupt``: every path
  that already handles Ctrl-C (the runner kills the command's process group and
  raises ``CommandInterrupted``; a run records its partial attempt; a sweep or
  scan saves what it has) handles them the same way, with no second mechanism.
* The process becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``) at
  start, so a descendant that called ``setsid`` and lost its parent is re-parented
  to kvdiag, not to init: :func:`end_descendants`, called on the way out, ends
  every process still below kvdiag, whichever session or group it is in.
* The exit status says which signal ended the run: 130 (SIGINT), 143 (SIGTERM),
  129 (SIGHUP) — 128 + the signal number, as a shell reports it.
"""

from __future__ import annotations

import os
import signal
import time

from kvdiag.proc.groups import SIGNALS_SEEN, become_subreaper, descendants, kill_pid

__all__ = ["Terminated", "end_descendants", "exit_code_for", "install", "received"]

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received = SIGNALS_SEEN


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; handled everywhere exactly like Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, _frame) -> None:
    first = not _received
    _received.append(signum)
    if not first:
        return      # the first signal is already unwinding; a second one must not cut its cleanup short
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through :func:`_on_signal`; become a subreaper."""
    _received.clear()
    for sig in HANDLED:
        signal.signal(sig, _on_signal)
    become_subreaper()


def forget() -> None:
    """Drop signals noted earlier in this process (a test calling the CLI again)."""
    _received.clear()


def received() -> int | None:
    """The first of the handled signals that arrived, or None."""
    return _received[0] if _received else None


def interruption() -> str:
    """How the user stopped this run, for its recorded reason: "Ctrl-C", "SIGTERM" or "SIGHUP"."""
    signum = received()
    return "Ctrl-C" if signum in (None, signal.SIGINT) else signal.Signals(signum).name


def exit_code_for(signum: int | None) -> int:
    """128 + the signal number (130 when no signal was seen: a Ctrl-C caught as KeyboardInterrupt)."""
    return 128 + int(signum if signum is not None else signal.SIGINT)


def end_descendants(grace: float = 2.0) -> list[int]:
    """SIGTERM every process below this one, SIGKILL what is left after ``grace``, reap
    the ones re-parented to us. Returns the pids that were still alive to be signalled."""
    me = os.getpid()
    _reap_children()
    found = descendants(me)
    if not found:
        return []
    for pid in found:
        kill_pid(pid, signal.SIGTERM)
        kill_pid(pid, signal.SIGCONT)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        _reap_children()
        if not descendants(me):
            return found
        time.sleep(0.02)
    for pid in descendants(me):
        kill_pid(pid, signal.SIGKILL)
    end = time.monotonic() + 2.0
    while time.monotonic() < end and descendants(me):
        _reap_children()
        time.sleep(0.02)
    _reap_children()
    return found


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
