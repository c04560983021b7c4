"""Compiler diagnostics in a build log: nvcc's EDG front end and gcc/clang.

A compile step is judged on the compiler's own error lines (a signature quotes
them); this parser counts every error a build printed, so a verdict can say
"3 of 3 errors are the signature's" or show the first error that is not.

nvcc (EDG) writes ``file(line): error: message`` (``error #20011-D:`` with a
diagnostic number, ``catastrophic error:`` when it gives up); gcc and clang write
``file:line:col: error: message``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvdiag.parse.text import cut_long_lines

_EDG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<severity>error|catastrophic error|warning)"
                  r"(?: #[\w-]+)?: (?P<message>.*)$")
_GNU = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<severity>error|fatal error|warning): "
                  r"(?P<message>.*)$")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    severity: str          # "error", "catastrophic error", "fatal error" or "warning"
    message: str
    raw: str               # the line as printed

    @property
    def is_error(self) -> bool:
        return self.severity != "warning"


def diagnostics(text: str) -> list[Diagnostic]:
    """Every diagnostic line of a build log, in order."""
    found = []
    for line in cut_long_lines(text)[0].splitlines():    # a line past LINE_LIMIT read cut
        match = _EDG.match(line) or _GNU.match(line)
        if match:
            found.append(Diagnostic(match["file"], int(match["line"]), match["severity"], match["message"],
                                    line))
    return found


def compiler_errors(text: str) -> list[Diagnostic]:
    """The error diagnostics (warnings left out)."""
    return [d for d in diagnostics(text) if d.is_error]
