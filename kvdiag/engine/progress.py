"""Progress on stderr for long runs: what is running and for how long.

A sanitizer run can take minutes (the seed's took 40); a silent terminal makes
users kill it. A heartbeat line every `interval` seconds names the elapsed time
and the test case being run, read from the output as it streams.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import TextIO

CASE_START = re.compile(r"^\s+([A-Z_0-9]+\([^)]*(?:\)[^:]*)?\)):")


class Progress:
    def __init__(self, stream: TextIO | None = None, interval: float = 10.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.interval = interval
        self.enabled = enabled
        self._label = ""
        self._case: str | None = None
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"kvdiag: {text}", file=self.stream, flush=True)

    def start(self, label: str) -> None:
        self._label, self._case, self._started = label, None, time.monotonic()
        self._stop.clear()
        if self.enabled and self.interval > 0:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def line(self, stream_name: str, line: str) -> None:
        """on_output callback: remember the case that is running."""
        match = CASE_START.match(line)
        if match:
            self._case = match.group(1)

    def stop(self) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
        return time.monotonic() - self._started

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            elapsed = time.monotonic() - self._started
            case = f", at {self._case}" if self._case else ""
            self.say(f"{self._label}: {elapsed:.0f} s elapsed{case}")
