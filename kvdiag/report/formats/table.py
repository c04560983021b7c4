"""The terminal summary: a header with the target, one row per entry (with what its affected range
says), the verdict counts, each inconclusive's reason on one line with the controls that held verdicts
back and the command that fixes it, and each entry's range evidence."""

from __future__ import annotations

from tabulate import tabulate

from kvdiag.report.formats import (SweepFormatter, entry_views, format_seconds, ordered_counts, printable,
                                  printable_summary, shard_note)
from kvdiag.report.held_back import held_back_lines, one_line
from kvdiag.store.sweeps import Sweep, target_summary

HEADERS = ["id", "verdict", "k/N", "range", "key evidence", "time"]


class TableFormat(SweepFormatter):
    suffix = ".txt"

    def format(self, sweep: Sweep) -> str:
        t = printable_summary(target_summary(sweep.target))
        views = entry_views(sweep)
        rows = [(v.id, v.verdict, v.k_of_n, range_cell(v), v.key_evidence, f"{v.duration_s:.1f} s")
                for v in views]
        headers = HEADERS
        if t.gpu_count > 1 and any(v.device for v in views):
            # On a multi-GPU host every result names the GPU that produced it.
            rows = [(*row, v.device.split()[0] if v.device else "-") for row, v in zip(rows, views)]
            headers = [*HEADERS, "GPU"]
        lines = [
            f"kvdiag {printable(sweep.kvdiag_version)} sweep, {sweep.started_at}: build {t.commit_label} "
            f"({t.build_dir or 'no build'}) on {t.gpu_label}",
        ]
        note = shard_note(sweep)
        if note:
            lines.append(note)
        lines += ["", tabulate(rows, headers=headers, disable_numparse=True) if rows else "(no entries)", ""]
        counts = ", ".join(f"{n} {v}" for v, n in ordered_counts(sweep) if n)
        lines.append(f"{len(sweep.outcomes)} entries in {format_seconds(sweep.wall_s)}: {counts or 'nothing ran'}")
        inconclusive = [v for v in views if v.verdict == "inconclusive"]
        lines += [f"{v.id} inconclusive: {one_line(v.reason)}" for v in inconclusive]
        lines += held_back_lines(v.reason for v in inconclusive)
        lines += range_lines(views)
        return "\n".join(lines) + "\n"


def range_cell(view) -> str:
    """The range column: the status and how the tree was placed (``affected [index]``, ``fixed [git]``)."""
    if not view.range_status:
        return "-"
    return f"{view.range_status} [{view.range_placed}]" if view.range_placed else view.range_status


def range_lines(views) -> list[str]:
    """Each entry's affected-range evidence, one line each (entries without a range are left out)."""
    placed = [v for v in views if v.range and v.range_status != "none"]
    return ([""] + [f"{v.id} range: {v.range}" for v in placed]) if placed else []
