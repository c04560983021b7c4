"""The launching kernels of roots whose records do not name them: each root's smallest case once more,
alone.

A record without device frames names its reporting function as its kernel, so an inlined function
(``flash_attn_ext_f16_process_tile``, ``__half2::__half2``) hides the kernel a maintainer searches for.
That happens two ways, and each has its own way back:

* **frames**: under ``--backtrace auto`` synccheck's records come without device frames
  (engine.discover.frames), which makes FLASH_ATTN_EXT's synccheck a minute instead of most of an
  hour. The root's smallest case, run alone under the same tool with ``--show-backtrace device``,
  names the kernels and instantiations that reach its site (a second or two).
* **launches**: racecheck's race records never carry device frames, whatever ``--show-backtrace``
  says (recorded on an H100, device session 20: a FLASH_ATTN_EXT race read in ``__half2::__half2``).
  Racecheck sees only shared memory, so the race is in a kernel that holds some: the smallest case,
  run alone with no sanitizer in the launch probe's mode, lists its launches, and the ones holding
  shared memory (or not saying, as a cuBLAS call) are the candidates; one candidate is the kernel.

The rows are saved with the discovery, so a document read back (or merged) shows the same kernels
without running anything.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvdiag.engine.discover.batch import ROUTE, Runner, Unit, run_unit
from kvdiag.engine.discover.roots import MAX_LISTED, Root, root_key
from kvdiag.parse.launches import Launch, parse_launches
from kvdiag.proc.threads import run_each

FRAMES = "frames"        # the smallest case under its tool with device frames
LAUNCHES = "launches"    # the smallest case's launches holding shared memory (racecheck)
STOPPED = "not run: the discovery was interrupted before its kernels were read"
MOST_ROOTS = 64          # roots reframed per discovery; a larger count is a report to narrow, not to rerun
_LAUNCH_TOOLS = ("racecheck",)   # tools that see only shared memory (engine.discover.routing)


def needs_frames(root: Root, frameless: Sequence[str]) -> bool:
    """A root whose records came without frames and that has a case to run again (an abort has
    no sanitizer record to reframe)."""
    return root.key.tool in frameless and not root.is_abort and bool(root.smallest)


def needs_launches(root: Root, mode: str) -> bool:
    """A racecheck root whose records named no kernel but the reporting function, where the program
    lists its launches (the launch probe's mode)."""
    return (mode == "launch" and root.key.tool in _LAUNCH_TOOLS and not root.is_abort and bool(root.smallest)
            and set(root.kernels) <= {root.key.function})


def way_for(root: Root, frameless: Sequence[str], mode: str) -> str | None:
    if needs_frames(root, frameless):
        return FRAMES
    return LAUNCHES if needs_launches(root, mode) else None


def reframe(roots: Sequence[Root], frameless: Sequence[str], runner: Runner, *, workers: int,
            relative: Mapping[str, str] | None = None, device: Any = None) -> list[dict[str, Any]]:
    """One row per root with a ``way_for`` it (at most MOST_ROOTS, the most-hit first): its smallest
    case run alone that way, and the kernels it names. A row whose run named none says why in ``why``;
    the root then keeps the kernels its records named."""
    chosen = [(r, way) for r in roots if (way := way_for(r, frameless, runner.mode))][:MOST_ROOTS]
    if not chosen:
        return []
    framed = dataclasses.replace(runner, backtrace="device", listed=frozenset())
    listing = dataclasses.replace(runner, listed=frozenset({ROUTE}))

    def one(index: int, root: Root, way: str) -> dict[str, Any]:
        case = root.smallest or {}
        op, params = str(case.get("op")), str(case.get("params"))
        started = time.monotonic()
        if way == FRAMES:
            outcome = run_unit(Unit(root.key.tool, op, (params,)), framed, name=f"frames-{index:05d}", device=device)
            return frames_row(root, outcome.records, relative, wall_s=time.monotonic() - started)
        outcome = run_unit(Unit(ROUTE, op, (params,)), listing, name=f"launches-{index:05d}", device=device)
        return launches_row(root, outcome.records, wall_s=time.monotonic() - started)

    tasks = [functools.partial(one, index, root, way) for index, (root, way) in enumerate(chosen, start=1)]
    # Ctrl-C or SIGTERM: every process stops (run_command watches the runner's cancel), the rows done are
    # kept, and the caller saves the discovery as interrupted.
    rows, _ = run_each(tasks, runner.cancel.set if runner.cancel is not None else (lambda: None),
                       name="kvdiag-frames", at_once=max(1, workers))
    return [row if row is not None else {**_blank(root, way), "why": STOPPED} for row, (root, way) in zip(rows, chosen)]


def _blank(root: Root, way: str, wall_s: float = 0.0) -> dict[str, Any]:
    case = root.smallest or {}
    return {**key_fields(root), "by": way, "op": case.get("op"), "params": case.get("params"),
            "wall_s": round(wall_s, 3), "kernels": {}, "instantiations": {}, "why": None}


def frames_row(root: Root, records, relative: Mapping[str, str] | None = None, *,
               wall_s: float = 0.0) -> dict[str, Any]:
    """What the framed run of ``root``'s smallest case said of the root: the launching kernels (template
    arguments stripped) and instantiations of its findings at the root's own key."""
    row = _blank(root, FRAMES, wall_s)
    for record in records:
        for finding in record.findings:
            if root_key(finding, relative) == root.key and finding.kernel:
                _count(row, finding.kernel)
    if not row["kernels"]:
        row["why"] = f"the framed run reported nothing at this root's site ({_states(records)})"
    return _ranked(row)


def launches_row(root: Root, records, *, wall_s: float = 0.0) -> dict[str, Any]:
    """The launches of ``root``'s smallest case (run alone, listed, no sanitizer) that hold shared memory
    or do not say: the kernels the racecheck root can be in."""
    row = _blank(root, LAUNCHES, wall_s)
    listed = [launch for record in records for launch in case_launches(record)]
    for launch in listed:
        if launch.shared_memory != 0:
            _count(row, launch.kernel)
    if not row["kernels"]:
        said = f"{len(listed)} launch(es), none holding shared memory" if listed else _states(records)
        row["why"] = f"its launches named no kernel holding shared memory ({said})"
    return _ranked(row)


def case_launches(record) -> tuple[Launch, ...]:
    """The launch lines of ``record``'s own stretch of its process's log."""
    if not record.log or not record.lines:
        return ()
    try:
        lines = Path(record.log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ()
    first, last = record.lines
    return parse_launches("\n".join(lines[max(0, first - 1):last]))


def _count(row: dict[str, Any], instantiation: str) -> None:
    name = instantiation.split("<", 1)[0]
    row["kernels"][name] = row["kernels"].get(name, 0) + 1
    row["instantiations"][instantiation] = row["instantiations"].get(instantiation, 0) + 1


def _ranked(row: dict[str, Any]) -> dict[str, Any]:
    ranked = sorted(row["instantiations"].items(), key=lambda kv: (-kv[1], kv[0]))
    row["instantiations"] = dict(ranked[:MAX_LISTED])
    row["kernels"] = dict(sorted(row["kernels"].items()))
    return row


def _states(records) -> str:
    return "; ".join(r.state if not r.why else f"{r.state}: {r.why}" for r in records) or "it gave no record"


def key_fields(root: Root) -> dict[str, Any]:
    return {"tool": root.key.tool, "kind": root.key.kind, "site": root.key.site, "function": root.key.function}


def apply_frames(roots: Sequence[Root], rows: Sequence[Mapping[str, Any]]) -> None:
    """Each root gets the row of its own key (the first that named kernels, when shards ran it twice)."""
    by_key: dict[tuple, Mapping[str, Any]] = {}
    for row in rows:
        key = (row.get("tool"), row.get("kind"), row.get("site"), row.get("function"))
        if key not in by_key or (row.get("kernels") and not by_key[key].get("kernels")):
            by_key[key] = row
    for root in roots:
        row = by_key.get(tuple(key_fields(root).values()))
        if row is not None:
            root.frames = dict(row)
