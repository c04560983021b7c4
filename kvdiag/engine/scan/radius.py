"""A scan's measured blast radius, as the ``[[radius]]`` table `kvdiag registry radius` writes.

From a saved scan (``kvdiag scan --format json``, or the scan's run.json): the kernel
instantiations its findings were in, the kernels of the entry's family that launched clean,
and case regexes that select every affected case, over the entry's ``[scan] dimensions``
(hsk, hsv, nr23, nb, types: what selects an instantiation). The regexes are grouped on every
dimension but the one with the most values among the affected cases, whose values become one
alternation; each is anchored per key, so ``nb=3`` never selects ``nb=32``. Every affected
case is checked to be selected before the table is handed back.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Mapping, Sequence

from kvdiag import __version__
from kvdiag.engine.verdict.planning import escape_params
from kvdiag.engine.scan.kernels import DEFAULT_DIMENSIONS, dimensions_of
from kvdiag.errors import DataError, UsageError
from kvdiag.parse.backend_ops import params_dict
from kvdiag.parse.launches import canonical
from kvdiag.registry.radius import fold_radius

#: what no test-backend-ops case's parameters hold (issue 43: a key with a quote or a newline
#: failed kvdiag's own check of the regexes, exit 70 for a malformed scan)
_NOT_IN_A_CASE = re.compile(r"[\"'`\\\x00-\x1f\x7f]")
MAX_CASE_CHARS = 4096
UPSTREAM_REPOS = {"llama.cpp": "https://github.com/ggml-org/llama.cpp", "ggml": "https://github.com/ggml-org/ggml"}


def _value_regex(values: Sequence[str]) -> str:
    escaped = [escape_params(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(?:" + "|".join(escaped) + ")"


def _joined(keys: Sequence[str], order: Sequence[str], values: Mapping[str, Sequence[str]]) -> str:
    """``^hsk=256,hsv=256(?:[, ]|$)(?:.*,)?nr23=\\[4,1\\](?:[, ]|$)…``: keys that follow each other
    in the case string are joined by their comma, others by anything ending in a comma."""
    out = "^"
    for i, key in enumerate(keys):
        here = order.index(key)
        if i == 0:
            out += "" if here == 0 else "(?:.*,)?"
        elif here == order.index(keys[i - 1]) + 1:
            out += ","
        else:
            out += "(?:[, ]|$)(?:.*,)?"
        out += f"{escape_params(key)}={_value_regex(values[key])}"
    return out + "(?:[, ]|$)"


def case_regexes(cases: Sequence[str], dimensions: Sequence[str]) -> list[str]:
    """Regexes (test-backend-ops -p, std::regex ECMAScript) whose union selects every case."""
    parsed = [params_dict(c) for c in cases]
    dims = [d for d in dimensions_of(cases, dimensions) if parsed and all(d in p for p in parsed)]
    if not dims:
        return ["^(?:" + "|".join(escape_params(c) for c in cases) + ")$"] if cases else []
    merge = max(dims, key=lambda d: len({p[d] for p in parsed}))
    groups: dict[tuple[str, ...], dict[str, None]] = {}
    for p in parsed:
        key = tuple(p[d] for d in dims if d != merge)
        groups.setdefault(key, {}).setdefault(p[merge], None)
    order = list(parsed[0])                        # every key, in the order test-backend-ops prints them
    keys = [d for d in order if d in dims]
    out = []
    for key, merged in sorted(groups.items()):
        values = {d: [v] for d, v in zip([d for d in dims if d != merge], key)}
        values[merge] = sorted(merged, key=_natural)
        out.append(_joined(keys, order, values))
    missing = [c for c in cases if not any(re.search(r, c) for r in out)]
    if missing:   # kvdiag's own failure: the regexes must cover what was measured
        raise AssertionError(f"radius regexes miss {len(missing)} affected case(s), e.g. {missing[0]}")
    return out


def _natural(value: str):
    return (0, int(value)) if value.isdigit() else (1, value)


def scan_parts(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(scan, target) from `scan --format json` output or a scan's run.json."""
    if not isinstance(data, Mapping):
        raise DataError("not a saved scan: the JSON is not an object")
    if "scan" in data and isinstance(data["scan"], Mapping):
        scan = data["scan"]
    elif "cases" in data:
        scan = data
    else:
        raise UsageError("not a saved scan: no 'cases' (give the JSON of `kvdiag scan --format json` or its run.json)")
    cases, target = scan.get("cases"), data.get("target") or {}
    if not isinstance(cases, Mapping) or not all(isinstance(c, Mapping) for c in cases.values()):
        raise DataError("not a saved scan: 'cases' must map each case to an object")
    if not isinstance(target, Mapping) or not isinstance(scan.get("kernels") or {}, Mapping):
        raise DataError("not a saved scan: 'target' and 'kernels' must be objects")
    return scan, target


def _tree_facts(target: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(commit, repo guessed from the layout, gpu) of the scan's target, as far as it recorded them."""
    build = target.get("build") or {}
    git = build.get("git") or {}
    gpu = None
    devices = ((target.get("environment") or {}).get("gpu") or {}).get("devices") or []
    if devices:
        d = devices[0]
        gpu = f"{d.get('name')} (cc {d.get('compute_capability')})" if d.get("name") else None
    options = build.get("options") or {}
    layout = "llama.cpp" if any(k.startswith("LLAMA_") for k in options) else "ggml" if options else None
    return git.get("commit"), UPSTREAM_REPOS.get(layout or ""), gpu


# size: one table, built key by key in the order the registry documents them.
def measure_radius(data: Mapping[str, Any], *, dimensions: Sequence[str] = (), repo: str | None = None,
                   tree: str | None = None, commit: str | None = None,
                   measured: dt.date | None = None) -> dict[str, Any]:
    """The ``[[radius]]`` table of one saved scan (UsageError when it cannot make one)."""
    scan, target = scan_parts(data)
    cases = scan.get("cases") or {}
    affected = sorted(p for p, c in cases.items() if c.get("verdict") == "confirmed")
    if not affected:
        raise UsageError("the scan has no affected case: there is no radius to record")
    unfit = next((p for p in affected if len(p) > MAX_CASE_CHARS or _NOT_IN_A_CASE.search(p)), None)
    if unfit is not None:
        raise DataError(f"case {unfit[:80]!r}{'…' if len(unfit) > 80 else ''} is not a test-backend-ops case: "
                        f"its parameters hold a quote, a backslash or a control character, or pass "
                        f"{MAX_CASE_CHARS} characters")
    found_commit, found_repo, gpu = _tree_facts(target)
    commit = commit or found_commit
    repo = repo or found_repo
    if not commit:
        raise UsageError("the scan does not record the tree's commit (a build outside git?): give --commit")
    if not repo:
        raise UsageError("the scan does not say which repository it measured: give --repo URL")
    kernels = scan.get("kernels") or {}
    rows = kernels.get("affected") or []
    table: dict[str, Any] = {
        "repo": repo, "commit": commit, "tree": tree, "measured": (measured or dt.date.today()).isoformat(),
        "kvdiag": str(scan.get("kvdiag_version") or __version__), "gpu": gpu, "op": scan.get("op"),
        "scanned": scan.get("params"), "cases": len(cases), "affected_cases": len(affected),
        "kernels": [r["instantiation"] for r in rows if r.get("level") != "function"] or None,
        # a scan saved before instantiations were grouped names no kernel, only what its findings were in
        "instantiations": [r["instantiation"] for r in rows if r.get("level") == "function"]
        or (None if rows else sorted({canonical(i) for p in affected for i in cases[p].get("instantiations") or ()})),
        "clean_kernels": [r["instantiation"] for r in kernels.get("clean") or ()] or None,
        "params": case_regexes(affected, dimensions or kernels.get("dimensions") or DEFAULT_DIMENSIONS),
    }
    return fold_radius(table)
