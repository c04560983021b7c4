"""An entry's case regexes in the form this build's test-backend-ops prints (kvdiag.parse.case_format).

An entry describes each case once. Where it meets a build (`run`, `scan`, `drift`, a sweep's
runs, a radius scan), every case regex it holds is rewritten for the build's era: the steps'
``params``, the ``case`` matchers' ``params``, the ``[scan]`` space and dimensions, the
measured radii and the ``[drift]`` case. Rewriting the entry once, where it meets the target,
is what makes run, scan, radius and drift select the same cases on every tree: none of them
keeps a regex of its own that could be left unmapped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from kvdiag.parse.case_format import CaseFormat
from kvdiag.registry.entry import Entry, Step

__all__ = ["adapt_entry", "case_format_of", "format_note"]


def case_format_of(target) -> CaseFormat:
    """The case format of the target's test-backend-ops (unknown without one)."""
    info = getattr(target, "backend_ops", None)
    return info.case_format if info is not None else CaseFormat(None, "no test-backend-ops in the build")


def adapt_entry(entry: Entry, fmt: CaseFormat) -> Entry:
    """The entry with every case regex in ``fmt``'s form; the entry itself when nothing changes."""
    if not fmt.known:
        return entry
    steps = tuple(_step(s, fmt) for s in entry.steps)
    signature = tuple(dataclasses.replace(m, params=fmt.adapt(m.params), fields=_with(m.fields, "params", fmt))
                      if m.type == "case" and m.params else m for m in entry.signature)
    scan = entry.scan
    if scan:
        scan = dataclasses.replace(scan, params=fmt.adapt(scan.params), dimensions=fmt.adapt_dimensions(scan.dimensions),
                                   table={**scan.table, "params": fmt.adapt(scan.params)})
    drift = entry.drift
    if drift:
        drift = dataclasses.replace(drift, params=fmt.adapt(drift.params), table=_with(drift.table, "params", fmt))
    radius = tuple({**t, **{k: fmt.adapt_all(t[k]) for k in ("params", "scanned") if t.get(k)}}
                   for t in entry.radius)
    adapted = dataclasses.replace(entry, steps=steps, signature=signature, scan=scan, drift=drift, radius=radius)
    return adapted if adapted != entry else entry


def format_note(entry: Entry, adapted: Entry, target) -> list[str]:
    """The verdict's note when the entry's case regexes were rewritten for the target's build (none otherwise)."""
    return [case_format_of(target).describe()] if adapted is not entry else []


def _step(step: Step, fmt: CaseFormat) -> Step:
    params = step.vars.get("params")
    if not isinstance(params, str):
        return step
    return dataclasses.replace(step, vars={**step.vars, "params": fmt.adapt(params)})


def _with(table: Mapping[str, Any], key: str, fmt: CaseFormat) -> dict[str, Any]:
    table = dict(table)
    if isinstance(table.get(key), str):
        table[key] = fmt.adapt(table[key])
    return table
