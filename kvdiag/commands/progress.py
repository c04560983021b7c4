"""Showing the engine's progress on stderr: tqdm bars on a terminal, a few plain lines elsewhere.

On a terminal: one bar for the counted job (entries, cases, runs, tools, bisect
steps) with its ETA, and one status line per running step (what runs, the test
case or the build tool's `[n/m]`, elapsed time, the step's budget), redrawn
every `interval` seconds by one thread, so sh's reader threads only set state.
Not on a terminal (CI logs, a pipe): messages as `kvdiag: …` lines and, for a
step that runs long, one line every `plain_interval` seconds. `quiet`: nothing.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

from tqdm import tqdm

from kvdiag.progress import Progress


class TerminalProgress(Progress):
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, tty: bool | None = None,
                 interval: float = 0.5, plain_interval: float = 30.0):
        super().__init__()
        self.stream = stream or sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.mode = "off" if quiet else ("bar" if tty else "plain")
        self.interval = interval
        self.plain_interval = plain_interval
        self._job: tqdm | None = None
        self._status: dict[int, tqdm] = {}
        self._heard: dict[int, float] = {}      # plain mode: when a lane last printed its heartbeat
        self._draw = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if self.mode != "off":
            self._thread = threading.Thread(target=self._tick, name="kvdiag-progress", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ the engine's calls

    def say(self, text: str) -> None:
        if self.mode == "bar":
            with self._draw:
                tqdm.write(f"kvdiag: {text}", file=self.stream)
        elif self.mode == "plain":
            print(f"kvdiag: {text}", file=self.stream, flush=True)

    def begin(self, what: str, total: int | None) -> None:
        if self.mode != "bar":
            return
        with self._draw:
            if self._job is not None:
                self._job.close()
            self._job = tqdm(total=total, desc=what, file=self.stream, position=0, leave=False,
                             mininterval=0, **_screen(),
                             bar_format="{desc}: {n_fmt}/{total_fmt} {bar:20} [{elapsed}<{remaining}]{postfix}"
                             if total else "{desc}: {n_fmt} [{elapsed}]{postfix}")

    def advance(self, done: str | None = None, n: int = 1) -> None:
        if self.mode != "bar" or self._job is None:
            return
        with self._draw:
            if done:
                self._job.set_postfix_str(done, refresh=False)
            self._job.update(n)

    @contextmanager
    def printing(self) -> Iterator[None]:
        """Bars cleared while the caller prints (to stdout, on the same terminal), then redrawn."""
        if self.mode != "bar":
            yield
            return
        with self._draw, tqdm.external_write_mode(file=self.stream):
            yield

    def end(self) -> None:
        with self._draw:
            if self._job is not None:
                self._job.close()
                self._job = None

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._draw:
            for bar in list(self._status.values())[::-1] + ([self._job] if self._job else []):
                bar.close()
            self._status.clear()
            self._job = None

    # ------------------------------------------------------------------ drawing

    def _running(self) -> list[Progress]:
        return [p for p in [self, *self.lanes()] if p.running]

    def status_text(self, lane: Progress, width: int = 100) -> str:
        """`  what runs · m:ss of N s`, what runs clipped so that the clock stays on the line."""
        budget = f" of {lane.budget_s:.0f} s" if lane.budget_s else ""
        clock = f" · {_clock(lane.elapsed())}{budget}"
        doing = lane.doing()
        room = max(10, width - len(clock) - 2)
        return f"  {doing if len(doing) <= room else doing[:room - 1] + '…'}{clock}"

    def _tick(self) -> None:
        while not self._closed.wait(self.interval if self.mode == "bar" else min(self.interval, 1.0)):
            try:
                self._redraw() if self.mode == "bar" else self._heartbeat()
            except Exception:  # a broken display must never end the run
                pass

    def _redraw(self) -> None:
        width = _screen()["ncols"] - 1
        with self._draw:
            for lane in [self, *self.lanes()]:
                bar = self._status.get(id(lane))
                if lane.running:
                    if bar is None:   # the next line below the job's bar, kept for this lane
                        bar = tqdm(total=None, file=self.stream, position=len(self._status) + 1, leave=False,
                                   bar_format="{desc}", mininterval=0, **_screen())
                        self._status[id(lane)] = bar
                    bar.set_description_str(self.status_text(lane, width), refresh=True)
                elif bar is not None:
                    bar.set_description_str("", refresh=True)
            if self._job is not None:
                self._job.refresh()

    def _heartbeat(self) -> None:
        now = time.monotonic()
        for lane in self._running():
            key = id(lane)
            last = max(self._heard.get(key, 0.0), lane.started)
            if now - last >= self.plain_interval:
                self._heard[key] = now
                self.say(f"{lane.doing()}: {lane.elapsed():.0f} s elapsed")


def _screen() -> dict[str, int]:
    """The terminal's size for tqdm; a pty that reports 0x0 (CI, `script`) gets 100x24, not hidden bars."""
    size = shutil.get_terminal_size((100, 24))
    return {"ncols": size.columns or 100, "nrows": size.lines or 24}


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:d}:{secs:02d}"


@contextmanager
def progress_display(quiet: bool = False, stream: TextIO | None = None, **kwargs) -> Iterator[TerminalProgress]:
    """A TerminalProgress for one command, its thread and bars closed when the command ends."""
    progress = TerminalProgress(stream, quiet=quiet, **kwargs)
    try:
        yield progress
    finally:
        progress.close()
