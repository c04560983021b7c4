"""A confirmation's printed site held against the registry's site for that tree (engine.verdict.site_check).

The recorded runs are BeeLlama's on the H200 (tests/fixtures/device/h200-fork-llama-session4):
D2's sanitizer printed `fattn-mma-f16.cuh:1607`, D1's abort `fattn.cu:380`. The trees are
stand-ins built from recorded evidence (tests/fixtures/trees). Through `run_entry`, a scenario
build whose source holds a small kernel of our own in D2's shape.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from engine_helpers import FIXTURES
from kvdiag.engine.verdict.site_check import check_site, printed_sites
from kvdiag.records.verdict import Outcome
from kvdiag.workspace.tree import Tree
from tree_stand_in import listing, stand_in


SESSION4 = FIXTURES / "device" / "h200-fork-llama-session4"


def _attempts(name: str):
    with gzip.open(SESSION4 / f"{name}.run.json.gz", "rt") as fh:
        data = json.load(fh)
    return Outcome.from_dict({"entry": data["entry"], **data["outcome"]}).attempts


def _tree(name: str, root: Path) -> Tree:
    source, build = stand_in(listing(name), root)
    return Tree.open(source, build)          # a plain folder: its commit unknown, the source decides


@pytest.fixture(scope="module")
def registry():
    from kvdiag.registry.loader import load_registry

    return load_registry(None)


def test_the_printed_sites_are_the_sanitizers_and_the_aborts_of_confirmed_attempts():
    # D2's process then died in a CUDA error check: its aborts are printed sites too, of other files
    assert printed_sites(_attempts("call2-D2")) == [("fattn-mma-f16.cuh", 1607), ("common.cuh", 1675),
                                                    ("ggml-cuda.cu", 109)]
    assert printed_sites(_attempts("call2-D1")) == [("fattn.cu", 380)]


@pytest.mark.parametrize("run, at", [("call2-D2", "ggml/src/ggml-cuda/fattn-mma-f16.cuh:1607"),
                                     ("call2-D1", "ggml/src/ggml-cuda/fattn.cu:380")])
def test_on_the_fork_the_printed_site_is_the_registrys_site_found_by_its_context(registry, tmp_path, run, at):
    entry = registry.get(run.split("-")[1])
    record, note = check_site(entry, _tree("fork-775450a68-facts.json", tmp_path), _attempts(run))
    assert note is None and record["agrees"] is True
    (placed,) = record["registry"]
    assert (f"{placed['file']}:{placed['line']}", placed["how"]) == (at, "by its context")


def test_against_another_trees_source_the_disagreement_is_a_note_naming_both_lines(registry, tmp_path):
    record, note = check_site(registry.get("D2"), _tree("llama-b9084-facts.json", tmp_path), _attempts("call2-D2"))
    assert record["agrees"] is False
    assert note == ("the detector printed fattn-mma-f16.cuh:1607, not the registry's site for this tree: "
                    "ggml/src/ggml-cuda/fattn-mma-f16.cuh:1400 (by its context); the registry's context or the "
                    "detector's site is out of date for this tree")


def test_without_a_source_the_line_recorded_for_the_commit_is_the_registrys_site(registry):
    tree = Tree(None, commit="775450a688437e8e9d32bb77ae466f7acb5d3577")
    record, note = check_site(registry.get("D2"), tree, _attempts("call2-D2"))
    assert note is None and record["agrees"] is True
    assert record["registry"][0]["how"] == "recorded for 775450a68"
    unknown = check_site(registry.get("D2"), Tree(None, commit="cfb56267e30b"), _attempts("call2-D2"))
    assert unknown[1] is None and unknown[0]["agrees"] is None           # nothing to hold it to: no note


def test_a_site_not_in_this_tree_is_a_note(registry, tmp_path):
    """b6225 has no unified vector launcher: D1's site has nothing to be found at."""
    record, note = check_site(registry.get("D1"), _tree("llama-b6225-facts.json", tmp_path), _attempts("call2-D1"))
    assert record["agrees"] is False
    assert note.startswith("the detector printed fattn.cu:380, but the registry's site is not placed in this tree: "
                           "the first `GGML_ABORT(\"fatal error\");` in the block of "
                           "`static void ggml_cuda_flash_attn_ext_vec(`: not found: no line holds the anchor")


EPILOGUE = ["if (np > 1 && threadIdx.y % np == 0) {", "    __syncthreads();", "} else if (np > 1) {",
            "    __syncthreads();", "}"]


def _source_with_barrier_at(root: Path, line: int) -> Path:
    path = root / "src" / "ggml-cuda" / "fattn-mma-f16.cuh"
    path.parent.mkdir(parents=True)
    path.write_text("\n" * (line - 2) + "\n".join(EPILOGUE) + "\n")
    return root


@pytest.mark.parametrize("barrier, note", [(1538, None), (1540, "not the registry's site for this tree: "
                                                                  "src/ggml-cuda/fattn-mma-f16.cuh:1540")])
def test_a_run_records_the_placement_and_notes_a_disagreement(kv, d2, tmp_path, barrier, note):
    target = kv.target_for("backend_ops_d2_diverges")
    source = _source_with_barrier_at(tmp_path / "tree", barrier)
    target = dataclasses.replace(target, build=dataclasses.replace(target.build, source_dir=source))
    outcome = kv.run(d2, target).outcome
    site = outcome.extra["site"]
    assert site["printed"] == ["fattn-mma-f16.cuh:1538"] and site["agrees"] is (note is None)
    assert site["registry"][0]["line"] == barrier
    notes = [w for w in outcome.warnings if "the detector printed" in w]
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0])
