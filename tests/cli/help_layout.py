"""Reading a `--help` page as click lays it out, to check that it reads like click's own.

Click writes a page as: the usage line(s); the help text, indented two columns,
each paragraph reflowed unless it opens with ``\\b`` (then kept line by line); then
sections (``Options:``, ``Commands:``), a header at column 0 and one definition row a
line; then the epilog, indented like the help text. `layout_problems` compares the
page with the command's own help and epilog paragraph by paragraph, so a ``\\b``
block is known as one from its source, not guessed from how its lines look.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import click

#: click's own "  [default: x]", "  [required]", "  [x>=1]" (its end may be on the next line)
EXTRA = re.compile(r" {2}\[[^\]]*(\]|$)")


@dataclass
class Page:
    usage: list[str] = field(default_factory=list)
    paragraphs: list[list[str]] = field(default_factory=list)
    sections: dict[str, list[str]] = field(default_factory=dict)
    epilog: list[list[str]] = field(default_factory=list)


def _paragraphs(lines: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            out[-1].append(line)
        elif out[-1]:
            out.append([])
    return [p for p in out if p]


def parse_page(text: str) -> Page:
    """Split a rendered page into usage, help paragraphs, sections and epilog paragraphs."""
    lines = text.rstrip("\n").split("\n")
    page = Page()
    i = 0
    while i < len(lines) and lines[i].strip():
        page.usage.append(lines[i])
        i += 1
    body: list[str] = []
    while i < len(lines) and not (lines[i] and not lines[i][0].isspace()):
        body.append(lines[i])
        i += 1
    page.paragraphs = _paragraphs(body)
    rest: list[str] = []
    while i < len(lines):
        header = lines[i]
        rows = []
        i += 1
        while i < len(lines) and lines[i].strip():
            rows.append(lines[i])
            i += 1
        page.sections[header] = rows
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i < len(lines) and lines[i][0].isspace():     # indented after a section's blank line: the epilog
            rest = lines[i:]
            break
    page.epilog = _paragraphs(rest)
    return page


def source_paragraphs(text: str | None) -> list[list[str]]:
    """A help text or epilog as click reads it: dedented, cut at ``\\f``, split at blank lines."""
    shown = inspect.cleandoc(text or "").partition("\f")[0]
    return _paragraphs(shown.split("\n"))


def is_verbatim(source: list[str]) -> bool:
    return source[0].strip() == "\b"


def _prose_problems(where: str, rendered: list[list[str]], source: list[list[str]]) -> list[str]:
    problems = []
    if len(rendered) != len(source):
        return [f"{where}: {len(rendered)} paragraph(s) shown, {len(source)} written"]
    for shown, written in zip(rendered, source):
        if is_verbatim(written):
            kept = [line.rstrip() for line in written[1:]]
            if [line[2:].rstrip() for line in shown] != kept:
                problems.append(f"{where}: the \\b block {kept[0]!r} is not shown line by line")
            continue
        for line in shown:
            if "  " in line.strip():
                problems.append(f"{where}: a run of spaces in a reflowed line: {line.strip()!r}")
    return problems


def _row_problems(header: str, rows: list[str]) -> list[str]:
    problems = []
    for row in rows:
        text = row.strip()
        if not row.startswith(" " * 8):              # a row that opens with its term: the gap is the first run
            text = re.split(r" {2,}", text, maxsplit=1)[1] if re.search(r" {2,}", text) else ""
        if "  " in EXTRA.sub("", text):
            problems.append(f"{header} a run of spaces in a reflowed line: {row.strip()!r}")
    return problems


def layout_problems(command: click.Command, text: str, width: int) -> list[str]:
    """Every way ``text`` (``command``'s rendered --help) departs from click's layout."""
    problems = [f"line over {width} columns ({len(line)}): {line.strip()!r}"
                for line in text.split("\n") if len(line) > width]
    page = parse_page(text)
    problems += _prose_problems("help", page.paragraphs, source_paragraphs(command.help))
    problems += _prose_problems("epilog", page.epilog, source_paragraphs(command.epilog))
    for header, rows in page.sections.items():
        problems += _row_problems(header, rows)
    return problems


def block(page: Page, title: str) -> list[str] | None:
    """The paragraph (help text or epilog) whose first line is ``title``, or None."""
    for paragraph in page.paragraphs + page.epilog:
        if paragraph[0].strip() == title:
            return paragraph
    return None


EXIT_ROW = re.compile(r"^ {4}[ \d]{3}  \S")
CONTINUED = re.compile(r"^ {9}\S")


def convention_problems(path: str, text: str) -> list[str]:
    """The project's convention (tests/cli/test_help.py): every command shows an example of
    itself and the exit codes it can return, one per line; the group shows the table of all."""
    page = parse_page(text)
    problems = []
    codes = block(page, "Exit codes:")
    if codes is None:
        problems.append(f"{path or 'kvdiag'}: no exit-code table")
    elif not codes[1:] or not EXIT_ROW.match(codes[1]) or not all(EXIT_ROW.match(r) or CONTINUED.match(r)
                                                                  for r in codes[1:]):
        problems.append(f"{path or 'kvdiag'}: the exit codes are not one code a line: {codes[1:]!r}")
    if path:
        example = block(page, "Example:") or block(page, "Examples:")
        if example is None or not any(re.match(r"^ {4}(kvdiag|git bisect run kvdiag) ", line) for line in example):
            problems.append(f"{path}: no example of the command")
    return problems
