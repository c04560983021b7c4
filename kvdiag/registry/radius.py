"""An entry's measured blast radius: the ``[[radius]]`` tables, read and written back.

`kvdiag scan` measures which kernel instantiations a defect is in and which cases reach
them; `kvdiag registry radius` turns a saved scan into one ``[[radius]]`` table per tree
(repository and commit) and writes it into the entry. Only those tables change: every
other byte of the file, its comments and its layout included, stays as it was, so the
entry's history shows the measurement and nothing else.

What reads the tables:

* `kvdiag scan` without ``--params`` scans the union of the recorded case regexes: the
  tables of the tree at hand (same commit) when there are any, else all of them;
* the launch-proof gate (kvdiag.engine.evidence.launch_proof) knows from ``kernels`` which
  instantiations the entry is about.

A table is capped: each of its lists holds at most ``MAX_RADIUS_ITEMS`` (1000; D2's largest
measured table has 179 case regexes). A scan that measured more keeps the first 1000
kernels or instantiations, its case regexes become the one regex the scan walked (which
selects every affected case, and more), and the table's ``folded`` list says what was left
out. Lint refuses a longer list (issue 43: a scan of 10^6 instantiations wrote an 88 MB
entry that passed lint and made every later `kvdiag list` take 6.5 s).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

FENCE_OPEN = "```toml"
FENCE_CLOSE = "```"
_HEADER = re.compile(r"^\s*\[")
_RADIUS_HEADER = re.compile(r"^\s*\[\[\s*radius\s*\]\]\s*(?:#.*)?$")


MAX_RADIUS_ITEMS = 1000
#: the lists a radius table may hold, each capped at MAX_RADIUS_ITEMS
RADIUS_LISTS = ("kernels", "instantiations", "clean_kernels", "params")


def fold_radius(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` within the cap (see the module's docstring), with ``folded`` saying what it left out."""
    out = dict(table)
    folded = []
    for key in ("kernels", "instantiations", "clean_kernels"):
        values = out.get(key) or []
        if len(values) > MAX_RADIUS_ITEMS:
            out[key] = list(values[:MAX_RADIUS_ITEMS])
            folded.append(f"{key}: {len(values)} measured, the first {MAX_RADIUS_ITEMS} kept")
    params = out.get("params") or []
    if len(params) > MAX_RADIUS_ITEMS:
        out["params"] = [out.get("scanned") or ".*"]
        folded.append(f"params: {len(params)} case regexes, replaced by the space the scan walked "
                      "(it selects every affected case, and more)")
    if folded:
        out["folded"] = folded
    return out


class RadiusWriteError(Exception):
    """The entry's text cannot take the table (no front matter)."""


def tables_for(entry_radius: Sequence[Mapping[str, Any]], commit: str | None,
               strict: bool = False) -> tuple[Mapping[str, Any], ...]:
    """The tables measured on ``commit`` (a prefix either way), else every table (``strict``: none)."""
    if commit:
        same = tuple(t for t in entry_radius if _same_commit(str(t.get("commit", "")), commit))
        if same or strict:
            return same
    return () if strict else tuple(entry_radius)


def _same_commit(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def radius_params(entry_radius: Sequence[Mapping[str, Any]], commit: str | None) -> str | None:
    """One -p regex: the union of the case regexes recorded for the tree (None when none)."""
    regexes: dict[str, None] = {}
    for table in tables_for(entry_radius, commit):
        params = table.get("params")
        for regex in ([params] if isinstance(params, str) else list(params or ())):
            regexes.setdefault(regex, None)
    if not regexes:
        return None
    if len(regexes) == 1:
        return next(iter(regexes))
    return "|".join(f"(?:{r})" for r in regexes)


def radius_kernels(entry_radius: Sequence[Mapping[str, Any]], commit: str | None) -> tuple[str, ...]:
    """The kernel instantiations the entry's radius names for the tree (else for any tree)."""
    out: dict[str, None] = {}
    for table in tables_for(entry_radius, commit):
        for kernel in table.get("kernels") or ():
            out.setdefault(kernel, None)
    return tuple(out)


# ------------------------------------------------------------------------ writing

def toml_string(text: str) -> str:
    """A TOML string: a literal '…' when that can hold it (regexes stay readable), else a basic one."""
    if "'" not in text and "\n" not in text:
        return f"'{text}'"
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + "".join(f"    {toml_string(str(v))},\n" for v in value) + "]"
    return toml_string(str(value))


def table_text(table: Mapping[str, Any]) -> str:
    """One ``[[radius]]`` table, keys in the given order (dates bare, as TOML dates)."""
    lines = ["[[radius]]"]
    for key, value in table.items():
        if value is None:
            continue
        rendered = str(value) if key == "measured" else _value(value)
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


def _front_matter_span(lines: Sequence[str]) -> tuple[int, int]:
    """(first line inside the fence, the fence's closing line) of the entry's front matter."""
    if not lines or lines[0].strip() != FENCE_OPEN:
        raise RadiusWriteError("the entry does not start with a ```toml front matter")
    for i in range(1, len(lines)):
        if lines[i].strip() == FENCE_CLOSE:
            return 1, i
    raise RadiusWriteError("the entry's ```toml front matter is not closed")


def _radius_blocks(lines: Sequence[str], start: int, end: int) -> list[tuple[int, int]]:
    """[first, last) line ranges of each [[radius]] table (its trailing blank lines included)."""
    blocks = []
    i = start
    while i < end:
        if _RADIUS_HEADER.match(lines[i]):
            j = i + 1
            while j < end and not _HEADER.match(lines[j]):
                j += 1
            blocks.append((i, j))
            i = j
        else:
            i += 1
    return blocks


def _block_commit(lines: Iterable[str]) -> str | None:
    for line in lines:
        m = re.match(r"^\s*commit\s*=\s*['\"]([0-9a-fA-F]+)['\"]", line)
        if m:
            return m.group(1)
    return None


def write_radius(text: str, table: Mapping[str, Any]) -> str:
    """The entry's text with ``table`` in place of the [[radius]] table of the same commit
    (or after the last one, or at the end of the front matter); nothing else changes."""
    lines = text.splitlines(keepends=True)
    start, end = _front_matter_span(lines)
    new = table_text(table)
    blocks = _radius_blocks(lines, start, end)
    for first, last in blocks:
        if _same_commit(_block_commit(lines[first:last]) or "", str(table["commit"])):
            blank = 0
            while last - blank - 1 > first and not lines[last - blank - 1].strip():
                blank += 1
            return "".join(lines[:first]) + new + "\n" * blank + "".join(lines[last:])
    at = blocks[-1][1] if blocks else end
    before = "".join(lines[:at])
    gap = "" if before.endswith("\n\n") else ("\n" if before.endswith("\n") else "\n\n")
    after = "".join(lines[at:])
    tail = "\n" if at < end and lines[at].strip() else ""
    return before + gap + new + tail + after
