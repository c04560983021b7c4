"""Small text helpers every layer uses on program output and for display: one copy of each.

Import-free on purpose: the CLI's start-up, the parsers and the report formats
all read them.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves) and OSC sequences (titles, links).
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences, so patterns see only the printed words."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def first_line(text: str) -> str:
    """The first line of ``text`` with something on it, stripped ("" when none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def clip(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace made one space), cut to ``width`` with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
