"""The shipped ggml index against real ggml trees, recorded from ggml's mirror (tests/fixtures/ranges/placements.json).

record_placements.py exported each tree with `git archive` (a tarball: no .git), took the blob
ids of the files the index tracks and the range evidence kvdiag gave there. Here the recorded
blob ids are placed again in the shipped index: the tree's true commit must lie inside the
placement, and each entry's answer must be the recorded one (a regenerated index that moved a
tree, or a registry range that changed, fails here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdiag.engine.verdict.placement import shipped_timeline
from kvdiag.engine.verdict.ranges import evaluate_range
from kvdiag.registry.loader import load_registry
from kvdiag.registry.repos import GGML
from kvdiag.workspace.placement.placed_history import LineHistory

RECORD = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "ranges" / "placements.json").read_text())
TREES = RECORD["trees"]


def test_the_record_was_made_with_this_index():
    assert RECORD["index_source"] == shipped_timeline().source


@pytest.mark.parametrize("ref", sorted(TREES))
def test_each_real_tree_is_placed_around_its_true_commit(ref):
    tree, timeline = TREES[ref], shipped_timeline()
    spans, unfit = timeline.fit(tree["blobs"])
    assert unfit == {} and spans
    if tree["position"] is not None:          # a tag on master's first-parent line
        assert any(s.lo <= tree["position"] <= (s.hi if s.hi is not None else timeline.head) for s in spans)
    assert tree["version"] in timeline.versions


@pytest.mark.parametrize("ref", sorted(TREES))
def test_each_entrys_ggml_range_gives_the_recorded_answer_at_every_end_of_the_placement(ref):
    tree, timeline = TREES[ref], shipped_timeline()
    spans, _ = timeline.fit(tree["blobs"])
    ends = {timeline.commit_at(p) for s in spans for p in (s.lo, s.hi)}
    for entry in load_registry().entries:
        ranges = [r for r in entry.ranges if r.repo == GGML]
        if not ranges:
            continue
        for commit in ends:
            statuses = {evaluate_range(r, LineHistory(timeline, commit)).status for r in ranges}
            assert statuses == {tree["ranges"][entry.id]["status"]}, (ref, entry.id, commit)
        assert tree["ranges"][entry.id]["placement"] == "index"


def test_the_recorded_answers_are_the_ones_known_from_the_history():
    """D11's ggml fix (da7d1472, 2026-06-12) is in v0.15.3 and later, not in v0.9.x; D2 has no ggml fix;
    D17's (4c540d0b, 2026-01-11) is in v0.9.7 and later, not in v0.9.1."""
    assert {ref: t["ranges"]["D11"]["status"] for ref, t in TREES.items()} == {
        "v0.9.1": "affected", "v0.9.7": "affected", "v0.15.3": "fixed", "v0.21.0": "fixed", "d99724f2": "fixed"}
    assert {ref: t["ranges"]["D17"]["status"] for ref, t in TREES.items()} == {
        "v0.9.1": "affected", "v0.9.7": "fixed", "v0.15.3": "fixed", "v0.21.0": "fixed", "d99724f2": "fixed"}
    assert {t["ranges"]["D2"]["status"] for t in TREES.values()} == {"affected"}
    assert {t["ranges"]["D3"]["status"] for t in TREES.values()} == {"unaffected"}   # ggml: no llama-server


def test_every_ggml_commit_the_registry_names_is_in_the_index():
    timeline = shipped_timeline()
    named = {c for e in load_registry().entries for r in e.ranges if r.repo == GGML for c in r.commits()}
    assert named and [c for c in named if timeline.position(c) is None] == []


def test_every_file_the_registry_names_is_tracked_by_the_index():
    """An entry naming a file the index does not track is placed without it (sessions 24 and 25 named
    getrows.cu and convert.cu and the index had neither until session 26 regenerated it)."""
    from kvdiag.engine.verdict.placement import named_files

    tracked = set(shipped_timeline().files)
    never_in_ggml = {"src/ggml-cuda/fattn-mma-kvarn-case.cuh", "tests/test-kvarn.cpp",   # the BeeLlama fork's own
                     "tests/test-upstream-merge-keepers-static.py"}
    assert [f for f in named_files(load_registry().entries) if f not in tracked] == sorted(never_in_ggml)
