"""The numeric test of the cases a sanitizer found something in, when the sanitized processes did
not compare (the launch probe's GPU-only mode, engine.discover.program).

A root says whether its cases also compute wrong numbers: a race that corrupts results is worse
than one that happens to be benign, and a FAIL in the numeric test is the evidence a maintainer
files upstream. Only the cases with findings need it, which are few, so they run once more on
the user's own test-backend-ops in test mode, unsanitized, several cases of one op per process
(each case once, whichever tools saw it). A case whose process ends before its status (an abort,
its budget) keeps no numeric status, and the root counts it as not tested: never as passing.
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from kvdiag.engine.discover.batch import case_regex
from kvdiag.engine.discover.cases import FINDINGS, CaseRecord
from kvdiag.engine.scan.batch import cases_per_pattern
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.proc.threads import run_each

MAX_PER_PROCESS = 64


def needs_numeric(record: CaseRecord) -> bool:
    """A case with findings from a run that did not compare."""
    return record.state == FINDINGS and record.mode != "test" and record.numeric is None


def numeric_units(records: Sequence[CaseRecord]) -> list[tuple[str, tuple[str, ...]]]:
    """(op, cases) per process: every case that needs the numeric test, once, in its op's order."""
    by_op: dict[str, list[str]] = {}
    for record in records:
        if needs_numeric(record) and record.params not in by_op.setdefault(record.op, []):
            by_op[record.op].append(record.params)
    units = []
    for op, cases in by_op.items():
        size = max(1, min(MAX_PER_PROCESS, cases_per_pattern(cases)))
        units += [(op, tuple(cases[i:i + size])) for i in range(0, len(cases), size)]
    return units


def run_numeric(records: Sequence[CaseRecord], *, binary: Path, log_dir: Path, budget_s: float, workers: int = 1,
                backend: str = "CUDA0", env: dict[str, str] | None = None,
                cancel: Any = None) -> tuple[list[CaseRecord], list[dict[str, Any]]]:
    """The records with ``numeric`` filled where a numeric run printed the case's status, and one row
    per process started (as the discovery's process rows: what ran, how long, what it gave)."""
    units = numeric_units(records)
    if not units:
        return list(records), []

    def one(index: int, op: str, cases: tuple[str, ...]) -> tuple[dict[str, str], dict[str, Any]]:
        name = f"numeric-{index:05d}"
        argv = [str(binary), "test", "-o", op, "-b", backend, "-p", case_regex(cases)]
        started = time.monotonic()
        row: dict[str, Any] = {"process": name, "tool": None, "op": op, "cases": len(cases)}
        try:
            result = run_command(argv, timeout=budget_s * len(cases), quiet_timeout=budget_s, log_dir=log_dir,
                                 name=name, env_overrides=env, cancel=cancel)
        except (CommandInterrupted, CommandNotFound) as exc:
            return {}, {**row, "wall_s": round(time.monotonic() - started, 3), "statuses": 0, "why": str(exc)}
        report = parse_backend_ops(strip_ansi(result.stdout_text()))
        statuses = {c.params: c.status for c in report.cases if c.op == op and c.params in cases and c.status}
        why = None if len(statuses) == len(cases) else f"{len(cases) - len(statuses)} case(s) printed no status: " \
                                                        f"{result.describe()}"
        return statuses, {**row, "wall_s": round(time.monotonic() - started, 3), "statuses": len(statuses), "why": why}

    tasks = [functools.partial(one, i + 1, op, cases) for i, (op, cases) in enumerate(units)]
    # Ctrl-C or SIGTERM: the running processes stop (run_command watches ``cancel``), no other starts, and
    # the caller saves the discovery as interrupted, its cases without a numeric status kept as they are.
    results, _ = run_each(tasks, cancel.set if cancel is not None else (lambda: None), name="kvdiag-numeric",
                          at_once=max(1, workers))
    done = [result if result is not None else
            ({}, {"process": f"numeric-{i + 1:05d}", "tool": None, "op": op, "cases": len(cases), "wall_s": 0.0,
                  "statuses": 0, "why": "not run: the discovery was interrupted before it started"})
            for i, ((op, cases), result) in enumerate(zip(units, results))]
    status: dict[tuple[str, str], str] = {}
    for (op, _), (statuses, _) in zip(units, done):
        status.update({(op, params): s for params, s in statuses.items()})
    out = [replace(r, numeric=status[(r.op, r.params)]) if needs_numeric(r) and (r.op, r.params) in status else r
           for r in records]
    return out, [row for _, row in done]
