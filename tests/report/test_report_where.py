"""The report's "Where" names the site in the reported build's layout and line, not other trees'."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from report_fixtures import d2_outcome, make_target
from kvdiag.engine.verdict.site_check import check_site
from kvdiag.registry.loader import load_registry
from kvdiag.report.upstream import upstream_report
from kvdiag.workspace.tree import Tree
from tree_stand_in import listing, stand_in


GUARD = "the first `__syncthreads();` in the block of `if (np > 1 && threadIdx.y % np == 0) {`"


@pytest.fixture(scope="module")
def d2():
    return load_registry(None).get("D2")


def _where(d2, target, outcome) -> str:
    text = upstream_report(d2, {"entry": "D2", "status": "finished", "target": target, "outcome": outcome.to_dict()})
    return text[text.index("## Where"):text.index("## What is established")]


def _llama_build(commit: str) -> dict:
    """A llama.cpp build (LLAMA_* options) whose source folder is not on this machine."""
    target = copy.deepcopy(make_target())
    target["build"].update(source_dir="/nowhere/llama.cpp", options={"GGML_CUDA": "ON", "LLAMA_BUILD_TESTS": "ON"})
    target["build"]["git"]["commit"] = commit
    return target


def test_a_run_on_the_older_release_names_its_own_line_and_layout(d2, tmp_path):
    """The run placed D2's site in the b9084 tree (its stand-in here) and the sanitizer printed the same line."""
    source, build = stand_in(listing("llama-b9084-facts.json"), tmp_path)
    outcome = d2_outcome()
    attempt = outcome.attempts[0]
    sites = [{**attempt.evidence.sites[0], "site": "fattn-mma-f16.cuh:1400", "line": 1400}]
    attempt = dataclasses.replace(attempt, evidence=dataclasses.replace(attempt.evidence, sites=tuple(sites)))
    placed, note = check_site(d2, Tree.open(source, build), [attempt])
    assert note is None
    outcome = dataclasses.replace(outcome, attempts=(attempt,), extra={"site": placed})
    where = _where(d2, _llama_build("66001722aa0c79ef12505488eb2d15400c3e8569"), outcome)
    assert (f"- site: `ggml/src/ggml-cuda/fattn-mma-f16.cuh:1400` in this build's tree ({GUARD}, found by its "
            "context); the detector printed `fattn-mma-f16.cuh:1400`") in where
    assert "- file: `ggml/src/ggml-cuda/fattn-mma-f16.cuh`" in where
    assert not any(n in where for n in ("1538", "1607", "d99724f2", "775450a68"))


def test_a_build_whose_commit_has_a_recorded_line_is_named_by_that_line(d2):
    where = _where(d2, make_target(), d2_outcome())                     # ggml d99724f2, a ggml-layout build
    assert f"- site: `src/ggml-cuda/fattn-mma-f16.cuh:1538` in this build's tree ({GUARD}, the line recorded " \
           "for d99724f2)" in where


def test_an_unplaced_site_says_so_and_labels_the_recorded_lines_as_other_trees(d2):
    where = _where(d2, _llama_build("0123456789ab"), d2_outcome())
    assert (f"- site: {GUARD} in `src/ggml-cuda/fattn-mma-f16.cuh`, not placed in this build's tree; recorded in "
            "other trees: 1538 at d99724f2, 1607 at 775450a68, 1538 at 749f688fc") in where
    assert "- file: `ggml/src/ggml-cuda/fattn-mma-f16.cuh`" in where


def test_a_run_that_confirmed_nothing_places_the_site_as_registry_verify_does(d2, tmp_path):
    """The issue's tarball: no .git (no commit, so no recorded line), D2 not confirmed there, and the report
    said "not placed in this build's tree" while `kvdiag registry verify` placed it. The run now keeps the
    placement by context (engine.verdict.site_check.place_in_tree) whatever its verdict."""
    from kvdiag.engine.verdict.site_check import place_in_tree
    from kvdiag.records.verdict import Verdict
    from kvdiag.registry.verify import verify_entry

    source, build = stand_in(listing("llama-b9084-facts.json"), tmp_path)
    tree = Tree.open(source, build, commit=None)
    verified = verify_entry(d2, tree).sites[0].placement
    outcome = dataclasses.replace(d2_outcome(), verdict=Verdict.INCONCLUSIVE, extra={"site": place_in_tree(d2, tree)})
    where = _where(d2, _llama_build("0123456789ab"), outcome)
    assert verified.line is not None
    assert (f"- site: `{verified.file}:{verified.line}` in this build's tree ({GUARD}, found by its "
            f"context)") in where
    assert "not placed" not in where
