"""Every backend-ops repro step selects a case on each tree whose whole case list a device run recorded.

A case regex that selects nothing gives an inconclusive verdict at best, and nobody notices until a
device run: D21's pattern ended `,src_overlap=0$`, and the BeeLlama fork's test-backend-ops prints no
such field (device session 26). The lists are the supported cases of two discoveries under memcheck
and initcheck: ggml d99724f2 (h100-session24) and the fork 775450a68 (h100-session26), each regex
adapted to the tree's case format as a run adapts it (kvdiag.parse.case_format).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvdiag.parse.case_format import SPLIT, adapt_regex
from kvdiag.registry.loader import load_registry

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
TREES = {"ggml d99724f2": DEVICE / "h100-session24" / "whole.json.gz",
         "fork 775450a68": DEVICE / "h100-session26" / "fork-discover.json.gz"}

# (entry, step, tree) -> why no supported case there is the step's
SELECTS_NONE = {
    ("D1", "seed-shape", "ggml d99724f2"): "the seed's shape (nh=4, GQA 4, nb=75) is not a case either build supports",
    ("D1", "seed-shape", "fork 775450a68"): "the seed's shape (nh=4, GQA 4, nb=75) is not a case either build supports",
    ("D8", "fast", "ggml d99724f2"): "q2_0s is a K/V type of the fork's own",
    ("D20", "fast", "fork 775450a68"): "the bf16 case came with ggml e661b3d4 (2026-08-11), after the fork's base",
}


def _cases(path: Path) -> dict[str, set[str]]:
    by_op: dict[str, set[str]] = {}
    for case in json.loads(gzip.open(path, "rt").read())["cases"]:
        by_op.setdefault(case["op"], set()).add(case["params"])
    return by_op


CASES = {tree: _cases(path) for tree, path in TREES.items()}
STEPS = [(entry.id, step) for entry in load_registry(None).entries for step in entry.steps
         if step.kind == "backend-ops" and (step.vars or {}).get("op")]


def selected(step, cases: dict[str, set[str]]) -> set[str]:
    params = step.vars.get("params")
    patterns = params if isinstance(params, (list, tuple)) else [params]
    return {c for c in cases.get(step.vars["op"], ()) if any(
        p is None or re.search(adapt_regex(p, SPLIT), c) for p in patterns)}


@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("entry_id, step", STEPS, ids=[f"{e}-{s.name}" for e, s in STEPS])
def test_the_step_selects_a_supported_case_or_the_registry_says_why_not(entry_id, step, tree):
    chosen = selected(step, CASES[tree])
    why = SELECTS_NONE.get((entry_id, step.name, tree))
    if why is None:
        assert chosen, f"{entry_id} {step.name}: no case of {step.vars['op']} on {tree} matches {step.vars.get('params')!r}"
    else:
        assert chosen == set(), f"{entry_id} {step.name} now selects {len(chosen)} case(s) on {tree}: drop '{why}'"


def test_the_list_of_exceptions_names_only_real_steps():
    steps = {(entry_id, step.name) for entry_id, step in STEPS}
    assert {(e, s) for e, s, _ in SELECTS_NONE} <= steps
