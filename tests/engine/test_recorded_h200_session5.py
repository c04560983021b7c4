"""What the fifth device session recorded on an H200 (tests/fixtures/device/h200-session5), read back.

Three trees built there: llama.cpp b9084 (an older release nobody tuned the registry to, before
85f99dca8), the BeeLlama fork 775450a68 and upstream 749f688fc, with the GPU image's own ninja
1.13. The checks: the line `registry verify` places D2's barrier at on b9084 is the line the
sanitizer printed there; D5's two real server logs confirm through the relative signature (the
tiny model, 97.7×); D13 on a fresh fork build is not-reproduced with its control's proof from
ninja 1.13 and confirmed after a header edit.
"""

from __future__ import annotations

import gzip
import json

import pytest

from engine_helpers import FIXTURES
from kvdiag.records.verdict import Verdict
from kvdiag.parse.sanitizer import parse_sanitizer, site_label
from kvdiag.registry.loader import load_registry
from kvdiag.registry.verify import verify_entries
from kvdiag.workspace.tree import Tree
from tree_stand_in import listing, stand_in

SESSION = FIXTURES / "device" / "h200-session5"


def _text(name: str) -> str:
    path = SESSION / name
    return gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()


def test_on_b9084_verify_places_d2_where_the_sanitizer_printed_it(tmp_path):
    """The issue's older release: verify once named the three barriers nearest 1538; now it names
    1400 by its context, and the H200's synccheck printed every finding at 1400."""
    printed = {site_label(s) for s in parse_sanitizer(_text("call1-old-D2-fast-1.sanitizer.log.gz")).sites}
    assert printed == {"fattn-mma-f16.cuh:1400"}
    recorded = listing("llama-b9084-facts.json")
    source, build = stand_in(recorded, tmp_path)
    tree = Tree.open(source, build, commit=recorded["tree"]["commit"])
    (d2,) = {r.entry_id: r for r in verify_entries(load_registry(None).entries, tree)}["D2"].sites
    assert d2.placement.at == "ggml/src/ggml-cuda/fattn-mma-f16.cuh:1400"
    said = _text("call1-old-verify.log")
    assert "D2.md: location.sites[0]: at ggml/src/ggml-cuda/fattn-mma-f16.cuh:1400, found by its context" in said
    assert "13 entries, 34 facts checked, 0 mismatch(es)" in said
    run = _text("call1-old-run-D2.log")
    assert "D2 CONFIRMED" in run and "barrier-divergence at fattn-\n  mma-f16.cuh:1400" in run
    assert "warning: the detector printed" not in run


def test_the_fork_run_of_d5_said_confirmed():
    """The two servers' logs are re-judged at both scales in test_recorded_h200_session6.py."""
    assert "D5 CONFIRMED" in _text("call3-fork-run-D5.log")


def test_d13_on_the_gpu_images_ninja_proves_its_control_and_sees_a_header_edit():
    record = json.loads(_text("call3-D13-fresh.run.json.gz"))
    outcome = record["outcome"]
    assert outcome["verdict"] == "not-reproduced"
    assert "the ninja -n control (ninja 1.13.2" in outcome["reason"]
    assert "called a staged build current right after building it and stale after an edit of its header" \
        in outcome["reason"]
    edited = _text("call3-fork-run-D13-edited.log")
    assert "D13 CONFIRMED" in edited and "211 build step(s) would run" in edited


@pytest.mark.parametrize("name", ["call1-old-sweep.json.gz", "call3-fork-sweep.json.gz"])
def test_the_recorded_sweeps_read_back(name, tmp_path):
    from kvdiag.store.sweeps import load_sweep

    path = tmp_path / "sweep.json"
    path.write_text(_text(name))
    sweep = load_sweep(path)
    verdicts = {o.entry_id: o.verdict.value for o in sweep.outcomes}
    assert verdicts["D13"] == "not-reproduced" and verdicts["D2"] == "confirmed"
