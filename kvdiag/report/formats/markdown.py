"""Markdown: the sweep as a page for a pull request, a wiki or an issue (from `sweep.md.j2`).

Text from logs is never trusted as Markdown: prose is escaped (`md_text`,
`md_cell`), and log lines, kernels and commands go into code spans or fences
long enough not to be closed by the backticks they contain.
"""

from __future__ import annotations

import re
from typing import Iterable

from kvdiag.report.formats import (SweepFormatter, entry_views, format_seconds, ordered_counts, printable,
                                  printable_summary, shard_note)
from kvdiag.report.templating import render
from kvdiag.store.sweeps import Sweep, target_summary

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def md_text(text: object) -> str:
    """Prose from a log or an entry, shown literally: Markdown and HTML punctuation escaped, on one line."""
    text = " ".join(printable(text).split())
    return _MD_SPECIAL.sub(lambda m: {"<": "&lt;", ">": "&gt;"}.get(m.group(1), "\\" + m.group(1)), text)


md_cell = md_text  # a table cell: one line, `|` escaped (md_text does both)


def _longest_run(text: str, char: str) -> int:
    runs = re.findall(re.escape(char) + "+", text)
    return max((len(r) for r in runs), default=0)


def md_code(text: object) -> str:
    """An inline code span that survives backticks inside it."""
    text = " ".join(printable(text).split())
    ticks = "`" * (_longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def md_fence(lines: Iterable[str] | str, lang: str = "") -> str:
    """A fenced block around `lines`, its fence longer than any backtick run in them."""
    body = printable(lines if isinstance(lines, str) else "\n".join(str(line) for line in lines))
    fence = "`" * max(3, _longest_run(body, "`") + 1)
    return f"{fence}{lang}\n{body}\n{fence}"


MARKDOWN_HELPERS = {"md_text": md_text, "md_cell": md_cell, "md_code": md_code, "md_fence": md_fence}


def fingerprint_rows(t) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(build rows, environment rows) as (label, value) — shared by the Markdown and HTML pages."""
    def show(value, unknown: str = "unknown") -> str:
        if value is None or value == "":
            return unknown
        if value is True:
            return "yes"
        if value is False:
            return "no"
        return str(value)

    commit = t.commit or "unknown"
    if t.describe and t.describe != t.commit:
        commit += f" ({t.describe})"
    dirty = show(t.dirty) + (f", {t.dirty_count} file(s)" if t.dirty and t.dirty_count else "")
    lineinfo = show(t.lineinfo) + (f" ({t.lineinfo_source})" if t.lineinfo and t.lineinfo_source else "")
    build = [("commit", commit), ("branch", show(t.branch)), ("uncommitted changes", dirty),
             ("build folder", show(t.build_dir, "no build")), ("build type", show(t.build_type)),
             ("CUDA architectures", show(t.cuda_architectures)), ("CUDA flags", show(t.cuda_flags, "none")),
             ("-lineinfo", lineinfo), ("staleness", t.staleness)]
    gpu = t.gpu_name or "none found"
    if t.cc:
        gpu += f", cc {t.cc}" + (f" ({t.arch})" if t.arch else "")
    if t.gpu_count > 1:
        gpu += f", {t.gpu_count} devices"
    driver = show(t.driver) + (f" (supports CUDA {t.driver_cuda})" if t.driver_cuda else "")
    env = [("GPU", gpu), ("driver", driver), ("CUDA runtime of kvdiag's GPU probe (cupy or pycuda; not the build's)", show(t.runtime)),
           ("compute-sanitizer", show(t.sanitizer_version, "not found")), ("nvcc", show(t.nvcc, "not found")),
           ("host", show(t.hostname)), ("OS", show(t.os)), ("machine key", show(t.machine_key))]
    return build, env


def human_time(stamp: str) -> str:
    """``2026-11-29T10:00:00+00:00`` -> ``2026-11-29 10:00 UTC`` (anything else unchanged)."""
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return str(stamp)
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
        return when.strftime("%Y-%m-%d %H:%M UTC")
    return when.strftime("%Y-%m-%d %H:%M")


#: verdicts whose evidence a page spells out (the others' reason is in the summary table)
DETAIL_VERDICTS = ("confirmed", "error", "inconclusive")


def heading_anchor(text: str) -> str:
    """The anchor GitHub (and most Markdown renderers) give a heading: lower case, punctuation
    dropped, spaces as hyphens. The summary table links each entry to its own heading."""
    slug = re.sub(r"[^\w\- ]", "", printable(text).strip().lower())
    return slug.replace(" ", "-")


def sweep_context(sweep: Sweep) -> dict:
    t = printable_summary(target_summary(sweep.target))
    build, env = fingerprint_rows(t)
    views = entry_views(sweep)
    return {"sweep": sweep, "t": t, "views": views, "counts": ordered_counts(sweep),
            "detailed": [v for v in views if v.verdict in DETAIL_VERDICTS or v.warnings],
            "note": printable(shard_note(sweep)), "anchor": heading_anchor, "wall": format_seconds(sweep.wall_s), "when": human_time(sweep.started_at),
            "build_rows": build, "env_rows": env}


class MarkdownFormat(SweepFormatter):
    suffix = ".md"

    def format(self, sweep: Sweep) -> str:
        return render("sweep.md.j2", **sweep_context(sweep), **MARKDOWN_HELPERS)
