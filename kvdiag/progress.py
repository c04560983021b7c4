"""The progress hook: what is running, for how long, and how far a counted job is.

It imports nothing of kvdiag, so the engine, the controls and the build tools can
all report through it. The engine prints nothing. It calls a `Progress` (pypa/build's `log` hook pattern):
`say` for a message, `begin`/`advance` for a job with a known number of units
(sweep entries, scan cases, drift runs, doctor tools, bisect steps), `start`/`stop`
around a running step and `line` as the step's output streams. This base class
only keeps that state, read from the output as it arrives (the test case running,
a build tool's `[n/m]`), so a library caller gets silence; `kvdiag.commands.progress`
renders it on a terminal.

Several threads (a sweep's CPU and GPU workers) report at once: each takes its
own `lane`, and a lane's state belongs to that thread alone.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

CASE_START = re.compile(r"^\s+([A-Z_0-9]+\([^)]*(?:\)[^:]*)?\)):")
#: ninja's status line (`[12/345] Building CUDA object ...`); cmake's Makefiles print `[ 42%] ...`
BUILD_STEP = re.compile(r"^\s*\[\s*(\d+)/(\d+)\]\s*(.*)")
T = TypeVar("T")


class Progress:
    """Silent progress state; subclass (and override `changed` and `say`) to show it."""

    def __init__(self, name: str = "", parent: "Progress | None" = None):
        self.name = name
        self.parent = parent
        self.label = ""
        self.case: str | None = None
        self.build_step: tuple[int, int, str] | None = None
        self.started = 0.0
        self.running = False
        self.budget_s: float | None = None
        self._lanes: dict[str, Progress] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ messages and counted jobs

    def say(self, text: str) -> None:
        """A one-line message (what is being prepared, a verdict that came in)."""
        if self.parent is not None:
            self.parent.say(text)

    def begin(self, what: str, total: int | None) -> None:
        """A job of `total` units (None: unknown) starts; `advance` reports each one done."""
        if self.parent is not None:
            self.parent.begin(what, total)

    def advance(self, done: str | None = None, n: int = 1) -> None:
        """`n` units of the job are done; `done` names the last (e.g. "D2 confirmed")."""
        if self.parent is not None:
            self.parent.advance(done, n)

    def end(self) -> None:
        """The counted job is over."""
        if self.parent is not None:
            self.parent.end()

    # ------------------------------------------------------------------ a running step

    def lane(self, name: str) -> "Progress":
        """The progress of one worker thread, reporting messages and jobs through this one."""
        with self._lock:
            if name not in self._lanes:
                self._lanes[name] = self._make_lane(name)
            return self._lanes[name]

    def _make_lane(self, name: str) -> "Progress":
        return Progress(name, parent=self)

    def lanes(self) -> list["Progress"]:
        with self._lock:
            return list(self._lanes.values())

    def start(self, label: str, budget_s: float | None = None) -> None:
        self.label, self.case, self.build_step = label, None, None
        self.started, self.running, self.budget_s = time.monotonic(), True, budget_s
        self.changed()

    def line(self, stream_name: str, line: str) -> None:
        """on_output callback: remember the case that is running, or the build step."""
        match = CASE_START.match(line)
        if match:
            self.case = match.group(1)
            self.changed()
            return
        match = BUILD_STEP.match(line)
        if match:
            self.build_step = (int(match.group(1)), int(match.group(2)), match.group(3).strip())
            self.changed()

    def stop(self) -> float:
        self.running = False
        self.changed()
        return self.elapsed()

    def elapsed(self) -> float:
        return time.monotonic() - self.started if self.started else 0.0

    def doing(self) -> str:
        """What this lane runs now, in words: label, then the case or the build step."""
        if not self.running:
            return ""
        parts = [self.label]
        if self.case:
            parts.append(f"at {self.case}")
        if self.build_step:
            n, m, what = self.build_step
            parts.append(f"[{n}/{m}] {what}".strip())
        return ", ".join(p for p in parts if p)

    def changed(self) -> None:
        """Called when the running step's state changed; a display redraws here."""
        if self.parent is not None:
            self.parent.changed()


def counted(items: Iterable[T], progress: Progress, what: str, label: Callable[[T], str],
            done: Callable[[T], str]) -> Iterator[T]:
    """The items, each reported to `progress` as a running step (`label`) and, once the
    loop body is through with it (a `continue` included), as one unit of `what` done."""
    items = list(items)
    progress.begin(what, len(items))
    for item in items:
        progress.start(label(item))
        yield item
        progress.stop()
        progress.advance(done(item))
    progress.end()
