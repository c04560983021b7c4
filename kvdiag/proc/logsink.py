"""The logs of a running command, written as its output arrives.

Complete lines go, as raw bytes, to ``<name>.stdout.log`` or ``<name>.stderr.log`` and to
``<name>.combined.log`` (arrival order kept, since one reader thread feeds both streams:
`kvdiag.proc.pump`), through unbuffered files: a kill of kvdiag loses nothing already read. A
chunk's complete lines are written as one block (one write per log, not one per line: a sanitized
batch prints hundreds of thousands of lines), and a stream's unfinished last line waits for its
end, so a line of one stream is never cut by the other's in the combined log (unless it passes
PARTIAL_LIMIT, 1 MiB: such a line is written as it comes, not held). ``on_output`` sees
each line too; its errors are counted, never raised, so a broken progress display cannot end a run.

A write the OS refuses (a full disk, a file-size limit) never passes in silence: the
command's logs keep what they had (clean prefixes: nothing is written to any of them
after the first failure, so none has a hole in the middle) and every byte that did not
reach a log is counted in ``lost``, with the OS's reason in ``write_error``. The runner puts both in
the command's result; the judge will not rest a verdict on a cut log. (A full disk once
cut a 10 MB output at 112 KiB and the verdict said nothing of it.) At the first refused
write each log also gives back its last :data:`RESERVE_BYTES` (counted as lost): on a full
disk that is the room the run's cmd.json and run.json need to record what happened.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from kvdiag.proc.logfiles import log_paths

__all__ = ["RESERVE_BYTES", "LogSink"]

RESERVE_BYTES = 64 << 10      # a run's cmd.json and run.json take a few KB each
PARTIAL_LIMIT = 1 << 20       # an unfinished line longer than this is written before its end (issue 43)


class LogSink:
    """Receives chunks from the output pump and writes whole lines to the three logs."""

    def __init__(self, log_dir: Path, name: str, tty: bool,
                 on_output: Callable[[str, str], None] | None):
        self.paths = log_paths(log_dir, name)
        # An earlier command of the same name may have left its stdout (or stderr) log as a hard
        # link to its combined log (_share_single_stream): opening both again would make two
        # handles write one file. New files, never the old inodes.
        for path in self.paths.values():
            path.unlink(missing_ok=True)
        # buffering=0: every write is a write(2); a kill of kvdiag loses nothing written.
        self.files = {k: open(p, "wb", buffering=0) for k, p in self.paths.items()}
        self.partial = {"stdout": bytearray(), "stderr": bytearray()}
        self.crlf = {"stdout": tty, "stderr": False}
        self.on_output = on_output
        self.callback_errors = 0
        self.first_callback_error: str | None = None
        self.write_errors = 0
        self.lost = {key: 0 for key in self.paths}   # bytes of output that did not reach each log
        self.write_error: str | None = None           # the OS's reason for the first refused write
        self.lock = threading.Lock()
        self.closed = False
        self.last_output = time.monotonic()   # when the last chunk arrived (quiet_timeout)
        self.written = {"stdout": 0, "stderr": 0}

    def feed(self, stream: str, data: bytes) -> None:
        """A chunk of ``stream``'s output, as it was read."""
        self.last_output = time.monotonic()
        with self.lock:
            if self.closed:
                return
            pending = self.partial[stream]     # grown in place, searched only in the new chunk:
            cut = data.rfind(b"\n") + 1       # a 10 MB line in 4 KB chunks was 12 GB of copying
            if not cut:
                pending += data
                if len(pending) > PARTIAL_LIMIT:       # a line this long is written as it comes
                    self._emit_block(stream, bytes(pending))
                    pending.clear()
                return
            block = bytes(pending) + data[:cut] if pending else data[:cut]
            pending[:] = data[cut:]
            self._emit_block(stream, block)

    def _emit_block(self, stream: str, block: bytes) -> None:
        """Whole lines (``block`` ends with its last newline, or is the unfinished rest at close)."""
        if self.crlf[stream]:
            block = block.replace(b"\r\n", b"\n")
            if block.endswith(b"\r"):
                block = block[:-1]
        self._write(stream, block)
        self._write("combined", block)
        self.written[stream] += len(block)
        if self.on_output is None:
            return
        text = block.decode("utf-8", errors="replace")
        for line in (text[:-1] if text.endswith("\n") else text).split("\n"):
            try:
                self.on_output(stream, line)
            except Exception as exc:  # a broken progress display must not end the run
                self.callback_errors += 1
                if self.first_callback_error is None:
                    self.first_callback_error = f"{type(exc).__name__}: {exc}"

    def _write(self, key: str, data: bytes) -> None:
        """All of ``data`` to one log, or count what did not get there (every log stays a prefix)."""
        if self.write_error is not None:
            self.lost[key] += len(data)
            return
        view = memoryview(data)
        while view:
            try:
                n = self.files[key].write(view)     # unbuffered: a short write is possible
            except OSError as exc:
                self.write_error = exc.strerror or str(exc)
                n = 0
            if not n:
                self.write_error = self.write_error or "the write was refused"
                self.lost[key] += len(view)
                for each in self.files:
                    self.lost[each] += self._give_back(each)
                return
            view = view[n:]

    def _give_back(self, key: str) -> int:
        """Cut the last RESERVE_BYTES off a log; how many bytes that took."""
        fh = self.files[key]
        try:
            size = fh.tell()
            keep = max(0, size - RESERVE_BYTES)
            os.ftruncate(fh.fileno(), keep)
            fh.seek(keep)
        except OSError:
            return 0
        return size - keep

    @property
    def lost_bytes(self) -> dict[str, int]:
        """{log file name: bytes of output that did not reach it}, for the logs that lost any."""
        return {self.paths[key].name: n for key, n in self.lost.items() if n}

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            for stream in ("stdout", "stderr"):
                rest = bytes(self.partial[stream])
                self.partial[stream].clear()
                if rest:
                    self._emit_block(stream, rest)
            self.closed = True
            for f in self.files.values():
                try:
                    f.close()
                except OSError:
                    pass
            self._share_single_stream()

    def _share_single_stream(self) -> None:
        """When only one stream printed, its log is the combined log byte for byte: keep one
        copy on disk (a hard link), so a 10 MB output is stored once, not twice."""
        quiet = [s for s in ("stdout", "stderr") if self.written[s] == 0]
        if len(quiet) != 1:
            return
        loud = "stderr" if quiet == ["stdout"] else "stdout"
        if self.lost["combined"] > self.lost[loud]:
            return      # a write failed on the combined log only: the stream's own log has more of it
        self.lost[loud] = self.lost["combined"]
        target, combined = self.paths[loud], self.paths["combined"]
        tmp = target.with_name(target.name + ".link")
        try:
            os.link(combined, tmp)
            os.replace(tmp, target)
        except OSError:
            tmp.unlink(missing_ok=True)     # a file system without hard links keeps both copies
