"""A scan's cases grouped by kernel instantiation: which are affected, which clean, which never reached.

A maintainer asks of a defect "which kernels have it, did mine run, is my shape affected".
The cases answer it once they are grouped by what ran them:

* **affected**: an instantiation a finding names (the ``__device__`` function the report
  is in, e.g. ``flash_attn_ext_f16_process_tile<256, 256, 4, 4, 2, false, false, false, true>``,
  and the ``__global__`` kernel of its device frame, ``flash_attn_ext_f16<256, 256, 4, 4, false, false>``);
* **clean**: a kernel of the entry's family that the launch probe saw start in a case with
  no finding (it ran under the detector and nothing was reported). Without the launch
  probe nothing can be called clean: a kernel that printed nothing may not have run;
* **never reached**: a kernel of the family compiled into the build (its symbol listing)
  that no case launched.

Each affected or clean instantiation carries the values, over its cases, of the case-space
dimensions that select it (``[scan] dimensions``: hsk, hsv, nr23, nb, type_K, type_V …).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from kvdiag.records.verdict import Verdict
from kvdiag.parse.backend_ops import params_dict
from kvdiag.parse.case_format import CaseFormat, kv_types_in
from kvdiag.parse.launches import canonical

DEFAULT_DIMENSIONS = ("hsk", "hsv", "nr23", "nb", "type_K", "type_V")


def _family(patterns: Sequence[str]):
    return lambda name: not patterns or any(re.search(p, name) for p in patterns)


def _values(cases: Iterable[str], dimensions: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, dict[str, None]] = {d: {} for d in dimensions}
    for case in cases:
        params = params_dict(case)
        for dim in dimensions:
            if dim in params:
                out[dim].setdefault(params[dim], None)
    return {d: _sorted(v) for d, v in out.items() if v}


def _sorted(values: Iterable[str]) -> list[str]:
    return sorted(values, key=lambda v: (0, int(v)) if v.isdigit() else (1, v))


def dimensions_of(cases: Iterable[str], dimensions: Sequence[str]) -> tuple[str, ...]:
    """The dimensions as these cases name them: type_K/type_V are one type_KV in an older
    test-backend-ops (kvdiag.parse.case_format)."""
    return CaseFormat(kv_types_in("\n".join(cases))).adapt_dimensions(tuple(dimensions))


def group_by_kernel(results: Mapping[str, Any], *, patterns: Sequence[str], dimensions: Sequence[str] = (),
                    compiled: Sequence[str] | None = None, listing: str | None = None) -> dict[str, Any]:
    """``results``: case params → Attempt. ``patterns``: the entry's kernel regexes (its family).
    ``compiled``: the build's kernels (None when not listed)."""
    dims = dimensions_of(results, tuple(dimensions) or DEFAULT_DIMENSIONS)
    in_family = _family(patterns)
    affected: dict[str, list[str]] = {}
    clean: dict[str, list[str]] = {}
    functions: set[str] = set()
    listed_cases = 0
    for params, attempt in sorted(results.items()):
        ev = attempt.evidence
        listed_cases += bool(ev.launch_listing)
        found = {canonical(i) for i in ev.instantiations}
        if attempt.verdict is Verdict.CONFIRMED:
            kernels, inlined = split_levels(ev, found, in_family)
            functions |= inlined
            for name in sorted(found | kernels):
                affected.setdefault(name, []).append(params)
        elif attempt.verdict is Verdict.NOT_REPRODUCED:
            for name in ev.launched:
                if in_family(name):
                    clean.setdefault(name, []).append(params)
    clean = {k: v for k, v in clean.items() if k not in affected}
    reached = set(affected) | set(clean) | {k for a in results.values() for k in a.evidence.launched}
    never = [k for k in (compiled or ()) if in_family(k) and k not in reached] if compiled is not None else None
    return {
        "dimensions": list(dims),
        "affected": [_row(k, v, dims, k in functions) for k, v in sorted(affected.items(),
                                                                          key=lambda kv: (-len(kv[1]), kv[0]))],
        "clean": [_row(k, v, dims, False) for k, v in sorted(clean.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "never_reached": never,
        "launch_listed_cases": listed_cases,
        "symbols": listing,
    }


def split_levels(ev, found: set[str], in_family) -> tuple[set[str], set[str]]:
    """(kernels, inlined functions) of an affected case. The findings are *in* the functions of
    the sanitizer's ``at`` lines; the ``__global__`` kernel around them is the one the launch
    probe saw start (of the entry's family), else the device frames' (found minus the ``at``
    names). Without either, a finding's function is taken to be its kernel."""
    at = set()
    for site in ev.sites:
        args = site.get("template_args") or ()
        name = f"{site.get('kernel')}<{', '.join(args)}>" if args else str(site.get("kernel"))
        at.add(canonical(name))
    launched = {k for k in ev.launched if in_family(k)}
    kernels = launched or (found - at)
    return kernels, (at - kernels) if kernels else set()


def _row(name: str, cases: list[str], dims: Sequence[str], inlined: bool) -> dict[str, Any]:
    return {"instantiation": name, "level": "function" if inlined else "kernel", "cases": len(cases),
            "values": _values(cases, dims)}


def describe_values(values: Mapping[str, Sequence[str]]) -> str:
    """``hsk=256 hsv=256 nr23=[4,1] nb=3|32 type_K=f16|q8_0``: one line per instantiation."""
    return " ".join(f"{dim}={'|'.join(vals)}" for dim, vals in values.items())
