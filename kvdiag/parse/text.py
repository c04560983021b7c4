"""Helpers shared by the parsers: line splitting, ANSI stripping, JSON shaping.

The tools kvdiag reads write colour codes (test-backend-ops wraps OK/FAIL in
them) and their streams get interleaved with other processes' output, so every
parser first normalises a line the same way. Keeping that in one place means a
new quirk of the terminals or tools is fixed once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

from kvdiag.parse.deadline import checked
from kvdiag.text import first_line, strip_ansi

__all__ = ["LINE_LIMIT", "clean_line", "cut_long_lines", "cut_note", "dataclass_dict", "first_line", "iter_lines",
           "jsonable", "split_top_level", "strip_ansi", "to_int"]

#: The longest line the parsers and the signature matchers read, in characters; a longer one is
#: cut to this length (its log on disk keeps it whole) and the verdict says how many were. Real
#: lines are far shorter (the longest in the recorded transcripts has 1456 characters); the cut
#: bounds the work one hostile line (10 MB without a blank) can ask of a parser (issue 43).
LINE_LIMIT = 16384


def clean_line(line: str) -> str:
    """One physical line as a parser wants it: no line ending, no colour codes.

    A carriage return inside a line (progress output) keeps only what a
    terminal would finally show after it, which is the text after the last CR.
    A line longer than LINE_LIMIT is cut to it.
    """
    line = line.rstrip("\r\n")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    return strip_ansi(line)[:LINE_LIMIT]


def iter_lines(source: str | Iterable[str]) -> Iterator[str]:
    """Yield cleaned lines from a whole text or from an iterable of lines.

    Accepting both lets callers hand over an open file (streaming, constant
    memory) or a string they already hold, through the same code path. The
    judging's deadline (kvdiag.parse.deadline) is looked at as the lines go.
    """
    if isinstance(source, str):
        if "\r" not in source and "\x1b" not in source:
            yield from checked(cut_long_lines(source)[0].split("\n"))  # already clean, as clean_line gives it
            return
        source = source.split("\n")
    for line in checked(source):
        yield clean_line(line)


def cut_long_lines(text: str) -> tuple[str, int]:
    """``text`` with every line longer than LINE_LIMIT cut to it, and how many were cut.

    One pass that copies nothing when no line is too long (the usual case)."""
    if len(text) <= LINE_LIMIT:
        return text, 0
    lines = text.split("\n")
    if max(map(len, lines)) <= LINE_LIMIT:
        return text, 0
    cut = sum(1 for line in lines if len(line) > LINE_LIMIT)
    return "\n".join(line[:LINE_LIMIT] for line in lines), cut


def cut_note(cut: int, before: str = "judging") -> str:
    """What a verdict (or, ``before="reading"``, an analysis) says about the lines it cut."""
    return (f"{cut} line(s) longer than {LINE_LIMIT} characters were cut to that length before {before} "
            "(the logs keep them whole)")


def dataclass_dict(obj: Any) -> dict:
    """A dataclass's fields as JSON data; the body of every result's ``to_dict``."""
    return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def jsonable(value: Any) -> Any:
    """Turn results, tuples and nested containers into plain JSON data.

    The run store writes results with json.dump; tuples become lists, nested
    results go through their own ``to_dict`` (which may add derived values),
    and non-finite floats become strings because JSON has no NaN.
    """
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclass_dict(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def split_top_level(text: str, sep: str = ",") -> tuple[str, ...]:
    """Split on ``sep`` only outside brackets: ``a=[1,2],b=(int)3`` -> 2 parts.

    Template argument lists and test-backend-ops parameters both nest commas
    inside ``[]``, ``()`` and ``<>``; a plain split would cut them apart.
    """
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth = max(depth - 1, 0)
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return tuple(parts)


def to_int(text: str | None) -> int | None:
    """Parse an integer the tools may print with thousands separators (``1,024``)."""
    if text is None:
        return None
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return None
