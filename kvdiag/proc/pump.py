"""The one thread that reads a child's stdout and stderr and hands their bytes to its logs.

Why not sh's readers: sh reads a line-buffered stream 1024 bytes at a time and calls back once
per line, formatting debug messages for every chunk, so kvdiag's Python ran once per output
line. A sanitized scan batch prints up to 8,224 barrier records; the whole-op scan of D2 printed
321,674 (tests/fixtures/device/h200-session7), and the batches' wall grew with their record count
(2.5 s with none, 8.7–10.3 s with 8,224) while kvdiag's own CPU sat at about one core of 16, the
GIL's ceiling. Here the child writes into a pty or pipe that kvdiag made, sh is told to pass
those descriptors on as they are (it neither reads nor parses them), and this thread reads up
to 64 KiB per system call and hands each chunk to the sink, which works on whole blocks of
lines (`kvdiag.proc.logsink`). One thread polls both descriptors, so the combined log keeps
the order in which output arrived.

A pseudo-terminal for stdout (``tty=True``) is put in raw mode before the child starts, as sh
did: no newline translation, no echo; C stdio in the child sees a terminal and line-buffers,
which is what lets a batch's findings land before the status line of their own case.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import termios
import threading
import time
import tty as _tty

from kvdiag.proc.logsink import LogSink

__all__ = ["OutputPump", "child_ends", "close_all"]

CHUNK = 64 << 10
_POLL_MS = 100
DRAIN_LIMIT_S = 5.0
"""After the command's group is gone, how long the pump may still read before it stops. Output a
dead group left in the pty or pipe arrives at once; only a descendant that escaped the group
(setsid) and kept the descriptor open can make the pump wait that long."""


def child_ends(tty: bool) -> tuple[dict[int, str], dict[str, int]]:
    """New descriptors for a child: ({our read end: stream}, {stream: the child's end}).

    stdout is a pseudo-terminal in raw mode when ``tty``, else a pipe; stderr is always a pipe
    (C stdio leaves stderr unbuffered either way). Python makes every one of them
    non-inheritable; sh dups the child's ends onto 1 and 2 in the child only.
    """
    ours: dict[int, str] = {}
    theirs: dict[str, int] = {}
    try:
        if tty:
            master, slave = os.openpty()
            ours[master], theirs["stdout"] = "stdout", slave
            _tty.setraw(slave)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        else:
            read, write = os.pipe()
            ours[read], theirs["stdout"] = "stdout", write
        read, write = os.pipe()
        ours[read], theirs["stderr"] = "stderr", write
    except BaseException:
        close_all((*ours, *theirs.values()))
        raise
    return ours, theirs


def close_all(fds) -> None:
    """Close each descriptor, whatever the others do."""
    for fd in list(fds):
        try:
            os.close(fd)
        except OSError:
            pass


class OutputPump(threading.Thread):
    """Reads the given descriptors until each reaches its end, feeding ``sink``; owns and closes them."""

    def __init__(self, sink: LogSink, fds: dict[int, str], *, name: str = "kvdiag-output"):
        super().__init__(name=name, daemon=True)
        self.sink = sink
        self.fds = dict(fds)
        self._stop_at: float | None = None    # set once, by finish(), from the thread that runs the command

    def run(self) -> None:
        poller = select.poll()
        for fd in self.fds:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        open_fds = set(self.fds)
        try:
            while open_fds:
                stop_at = self._stop_at
                if stop_at is not None and time.monotonic() >= stop_at + DRAIN_LIMIT_S:
                    break
                events = poller.poll(_POLL_MS)
                if not events:
                    if stop_at is not None:
                        break           # the group is gone and nothing more came: drained
                    continue
                for fd, _ in events:
                    data = _read(fd)
                    if not data:
                        poller.unregister(fd)
                        open_fds.discard(fd)
                        continue
                    try:
                        self.sink.feed(self.fds[fd], data)
                    except Exception:       # never stop reading: a child blocked on a full pipe would hang
                        self.sink.write_errors += 1
        finally:
            close_all(self.fds)

    def finish(self) -> None:
        """The command's group is gone: read what it left, then end (at once on end of file)."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self.join(DRAIN_LIMIT_S + 1.0)


def _read(fd: int) -> bytes:
    """One chunk, or b"" at the end (a pty's master reads EIO once every slave is closed)."""
    while True:
        try:
            return os.read(fd, CHUNK)
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.EBADF):
                return b""
            raise
