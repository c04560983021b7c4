"""The launching kernels of roots found without device frames: each root's smallest case once more,
alone, with its frames.

Under ``--backtrace auto`` synccheck's records come without device frames (engine.discover.frames):
that is what makes FLASH_ATTN_EXT's synccheck a minute instead of most of an hour, but a record
without frames names its reporting function as its kernel, so an inlined function
(``flash_attn_ext_f16_process_tile``) hides the kernel a maintainer searches for
(``flash_attn_ext_f16``). A root needs its frames once, not in every case: its smallest case, run
alone under the same tool with ``--show-backtrace device``, costs a second or two and names the
kernels and instantiations that reach the root's site. The rows are saved with the discovery, so a
document read back (or merged) shows the same kernels without running anything.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from kvdiag.engine.discover.batch import Runner, Unit, run_unit
from kvdiag.engine.discover.roots import MAX_LISTED, Root, root_key

FRAMED_BY = "its smallest case again with device frames"
STOPPED = "not run: the discovery was interrupted before its frames were read"
MOST_ROOTS = 64          # roots reframed per discovery; a larger count is a report to narrow, not to rerun


def needs_frames(root: Root, frameless: Sequence[str]) -> bool:
    """A root whose records came without frames and that has a case to run again (an abort has
    no sanitizer record to reframe)."""
    return root.key.tool in frameless and not root.is_abort and bool(root.smallest)


def reframe(roots: Sequence[Root], frameless: Sequence[str], runner: Runner, *, workers: int,
            relative: Mapping[str, str] | None = None, device: Any = None) -> list[dict[str, Any]]:
    """One row per root that ``needs_frames`` (at most MOST_ROOTS, the most-hit first): the smallest
    case run alone with device frames, and the kernels of its findings at the root's site. A row
    whose run found nothing there says why in ``why``; the root then keeps its frameless kernels."""
    chosen = [r for r in roots if needs_frames(r, frameless)][:MOST_ROOTS]
    if not chosen:
        return []
    framed = dataclasses.replace(runner, backtrace="device", listed=frozenset())

    def one(index: int, root: Root) -> dict[str, Any]:
        case = root.smallest or {}
        unit = Unit(root.key.tool, str(case.get("op")), (str(case.get("params")),))
        started = time.monotonic()
        outcome = run_unit(unit, framed, name=f"frames-{index:05d}", device=device)
        return frames_row(root, outcome.records, relative, wall_s=time.monotonic() - started)

    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kvdiag-frames")
    futures = [pool.submit(one, index, root) for index, root in enumerate(chosen, start=1)]
    try:
        for future in futures:
            future.result()
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM: every framed process stops (run_command watches the runner's cancel), the
        # rows done are kept and the discovery is saved as interrupted by the caller.
        if runner.cancel is not None:
            runner.cancel.set()
        for future in futures:
            future.cancel()
    finally:
        pool.shutdown(wait=True)
    return [f.result() if f.done() and not f.cancelled() else {**key_fields(r), "op": (r.smallest or {}).get("op"),
            "params": (r.smallest or {}).get("params"), "wall_s": 0.0, "kernels": {}, "instantiations": {},
            "why": STOPPED} for f, r in zip(futures, chosen)]


def frames_row(root: Root, records, relative: Mapping[str, str] | None = None, *,
               wall_s: float = 0.0) -> dict[str, Any]:
    """What the framed run of ``root``'s smallest case said of the root: the launching kernels (template
    arguments stripped) and instantiations of its findings at the root's own key."""
    case = root.smallest or {}
    row: dict[str, Any] = {**key_fields(root), "op": case.get("op"), "params": case.get("params"),
                           "wall_s": round(wall_s, 3), "kernels": {}, "instantiations": {}, "why": None}
    states = []
    for record in records:
        states.append(record.state if not record.why else f"{record.state}: {record.why}")
        for finding in record.findings:
            if root_key(finding, relative) != root.key or not finding.kernel:
                continue
            name = finding.kernel.split("<", 1)[0]
            row["kernels"][name] = row["kernels"].get(name, 0) + 1
            row["instantiations"][finding.kernel] = row["instantiations"].get(finding.kernel, 0) + 1
    if not row["kernels"]:
        said = "; ".join(states) or "it gave no record"
        row["why"] = f"the framed run reported nothing at this root's site ({said})"
    ranked = sorted(row["instantiations"].items(), key=lambda kv: (-kv[1], kv[0]))
    row["instantiations"] = dict(ranked[:MAX_LISTED])
    row["kernels"] = dict(sorted(row["kernels"].items()))
    return row


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
