"""`kvdiag registry verify` on upstream trees nobody tuned the registry to.

Four llama.cpp releases spanning a year, none used anywhere else in the tests
(tests/fixtures/trees/README.md says how each listing was recorded): b6225 (2025-08-21),
b8124 (2026-02-21), b9084 (2026-05-08, the last release whose D2 barrier sits where the
issue's older release had it) and b9156 (2026-05-14, the last release before 85f99dca8
whose barrier had not yet reached 1538). Every fact's state on the stand-in tree is held
to what verify said on the real tree, and the lines below are asserted by hand: each one
was read in the real file.
"""

from __future__ import annotations

import shutil

import pytest

from kvdiag.cli import main
from kvdiag.registry.loader import load_registry
from kvdiag.registry.verify import verify_entries
from kvdiag.workspace.tree import Tree
from tree_stand_in import listing, stand_in

OTHER_TREES = {"D3", "D4", "D5", "D7", "D9", "D10"}      # the fork's entries: their detection facts are absent

# past D17's fix (24af22fc3, 2026-01-06): ssm_scan_f32_group is still there, rewritten to reduce with
# warp_reduce_sum, and no line declares stateC, so both sites' anchor is absent
PAST_D17 = ["D17.md: location.sites[0]", "D17.md: location.sites[1]"]
# past D19's fix in the fork (59afd3a20, 2026-07-17): the sink read became `sinks_f[c]` behind a bound
PAST_D19_IN_THE_FORK = ["D19.md: location.sites[0]"]
# before D18's range (046e28443, 2026-05-09): the combine and the Q load are older code, the 192/128 row is not
BEFORE_D18 = ["D18.md: location.sites[2]"]
# before the gather D20 names (k_get_rows_float_vec, llama.cpp 305ba519a, 2026-07-21): MUL_MAT_ID gathered with
# k_get_rows_float, so the kernel and its line are absent from every release here
BEFORE_D20 = ["D20.md: location.functions[0]", "D20.md: location.sites[0]"]
# before llama.cpp 74976e1ae (2026-07-06, "refactor cuBLAS"): the batched GEMM that D21's conversion reads was
# written by ggml_cuda_mul_mat_batched_cublas_impl, so the entry's caller ggml_cuda_mul_mat_cublas_impl is absent;
# the conversion and its line are there (D21_LINES)
BEFORE_D21 = ["D21.md: location.functions[1]"]
# before the tile_y load took its pointer as `((kb0 * qk / ne_block) * sz + sz)` (b6225 computes it from
# sizeof(block_q8_1_mmq)): D23's first site's anchor is absent; its ids_dst loads are there (mmq_x for J)
BEFORE_D23_TILE_Y = ["D23.md: location.sites[0]"]

# tag -> (D2's barrier, D1's abort site or None when its launcher is not in the tree, the mismatches)
TREES = {
    "b6225": (1108, None, ["D1.md: location.files[1]", "D1.md: location.functions[1]", "D1.md: location.sites[0]",
                           # before D14's and D16's code existed (cpy_scalar_transpose 2025-11, block_reduce 2026-01)
                           "D14.md: location.functions[0]", "D14.md: location.sites[0]", "D14.md: location.sites[1]",
                           "D16.md: location.functions[0]", "D16.md: location.sites[0]"] + BEFORE_D18 + BEFORE_D20
                          + BEFORE_D21 + BEFORE_D23_TILE_Y),
    "b8124": (1326, 268, PAST_D17 + BEFORE_D18 + BEFORE_D20 + BEFORE_D21),
    "b9084": (1400, 311, PAST_D17 + BEFORE_D18 + BEFORE_D20 + BEFORE_D21),
    "b9156": (1405, 327, PAST_D17 + BEFORE_D20 + BEFORE_D21),
}
# tag -> D21's read (convert_unary's `y[iy] = ggml_cuda_cast<dst_t>(x[ix]);`), read in the real convert.cu
D21_LINES = {"b6225": 631, "b8124": 642, "b9084": 680, "b9156": 680}


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


def _tree_of(name: str, root):
    recorded = listing(name)
    source, build = stand_in(recorded, root)
    return recorded, Tree.open(source, build, commit=recorded["tree"]["commit"])


def _said(reports) -> dict:
    """Verify's answers as record_tree.py keeps them: every fact's state, each site's state and line."""
    return {r.entry_id: {"other_tree": r.other_tree is not None, "facts": r.states,
                         "sites": {s.key: [s.placement.state, s.placement.line] for s in r.sites}} for r in reports}


def _tree(tag: str, root):
    return _tree_of(f"llama-{tag}-facts.json", root)


@pytest.mark.parametrize("tag", sorted(TREES))
def test_every_fact_states_on_the_stand_in_what_verify_said_on_the_real_tree(tag, tmp_path, registry):
    recorded, tree = _tree(tag, tmp_path)
    reports = verify_entries(registry.entries, tree)
    assert _said(reports) == recorded["verify"]
    assert {r.entry_id for r in reports if r.other_tree} == OTHER_TREES
    assert sum(r.checked for r in reports) == 114


@pytest.mark.parametrize("tag", sorted(TREES))
def test_each_site_is_at_the_line_read_in_that_tree(tag, tmp_path, registry):
    d2_line, d1_line, mismatches = TREES[tag]
    _, tree = _tree(tag, tmp_path)
    reports = {r.entry_id: r for r in verify_entries(registry.entries, tree)}
    (d2,) = reports["D2"].sites
    assert (d2.placement.state, d2.placement.at) == ("found", f"ggml/src/ggml-cuda/fattn-mma-f16.cuh:{d2_line}")
    assert d2.unrecorded and d2.placement.how == "by its context"
    (d1,) = reports["D1"].sites
    if d1_line is None:
        assert d1.placement.state == "not found"
        assert "no line holds the anchor `static void ggml_cuda_flash_attn_ext_vec(`" in d1.placement.detail
    else:
        assert d1.placement.at == f"ggml/src/ggml-cuda/fattn.cu:{d1_line}"
    assert [f"{m.file}: {m.key}" for r in reports.values() for m in r.mismatches] == mismatches


# tag -> the lines of D14's two sites, D15's two, D16's one, D17's two (write, read), D18's three (the
# combine's read, the Q load, the 192/128 row) and D19's sink read; None: the code is not in the tree
# (D14's and D16's not yet, D17's no longer, D18's row not yet). D19's read is older than its range (the
# sinks came in 2025-08, the padding that lets it leave the group in 2026-01): b6225 holds it too
NEW_SITES = {
    "b6225": (None, None, 78, 79, None, 178, 208, 1211, 877, None, 967),
    "b8124": (74, 85, 78, 79, 606, None, None, 1426, 1033, None, 1156),
    "b9084": (75, 86, 78, 79, 608, None, None, 1500, 1103, None, 1230),
    "b9156": (75, 86, 78, 79, 608, None, None, 1505, 1108, 67, 1235),
}


@pytest.mark.parametrize("tag", sorted(NEW_SITES))
def test_the_races_found_by_discover_are_placed_by_their_context(tag, tmp_path, registry):
    """D14-D19's sites in four releases, each read in the real file; b6225 predates the cpy tile and
    block_reduce (their ranges start in 2025-11 and 2026-01), so those sites are not found there, and
    only b6225 is inside D17's range (2025-07-02 to 2026-01-06): the later three have no stateC. Only
    b9156 is inside D18's range (from 2026-05-09): the older three have the combine and the Q load but
    no 192/128 configuration."""
    _, tree = _tree(tag, tmp_path)
    reports = {r.entry_id: r for r in verify_entries(registry.entries, tree)}
    placed = tuple(s.placement.line if s.placement.state == "found" else None
                   for entry_id in ("D14", "D15", "D16", "D17", "D18", "D19") for s in reports[entry_id].sites)
    assert placed == NEW_SITES[tag]


@pytest.mark.parametrize("tag", sorted(D21_LINES))
def test_d21s_conversion_is_in_every_release_and_its_caller_under_the_older_name(tag, tmp_path, registry):
    _, tree = _tree(tag, tmp_path)
    (report,) = [r for r in verify_entries(registry.entries, tree) if r.entry_id == "D21"]
    (site,) = report.sites
    assert (site.placement.state, site.placement.at) == ("found", f"ggml/src/ggml-cuda/convert.cu:{D21_LINES[tag]}")
    assert report.states["location.functions[0]"] == "found"
    assert report.states["location.functions[1]"] == "absent"


def test_verify_names_the_older_releases_barrier_exactly_and_never_the_nearest_lines(tmp_path, capsys):
    """The issue: on this tree verify said `now at line 1425, 1457, 1521`, the three barriers nearest
    1538; 1425 is the balancing barrier, and `kvdiag run D2` confirmed a fourth line."""
    recorded, tree = _tree("b9084", tmp_path)
    argv = ["registry", "verify", "--source", str(tree.source), "--build", str(tree.build),
            "--commit", recorded["tree"]["commit"], "D2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("D2.md: location.sites[0]: at ggml/src/ggml-cuda/fattn-mma-f16.cuh:1400, found by its context "
            "(the first `__syncthreads();` in the block of `if (np > 1 && threadIdx.y % np == 0) {`; "
            "recorded: 1538 at d99724f2, 1607 at 775450a68, 1538 at 749f688fc)") in err
    assert not any(n in err for n in ("1425", "1457", "1521"))


def test_the_old_bare_site_is_ambiguous_there_listing_each_candidate(tmp_path, project_dir, capsys):
    """D2's site as it was (a line and `__syncthreads();`, no anchor): the excerpt holds two
    barriers, the reported one and the balancing one, and verify lists both with their context
    (in the excerpt the code line before 1400 is the guard; the real file has 13 more candidates)."""
    registry = tmp_path / "registry"
    shutil.copytree(project_dir / "registry", registry)
    text = (registry / "D2.md").read_text()
    (registry / "D2.md").write_text(text.replace('anchor = "if (np > 1 && threadIdx.y % np == 0) {"\n', ""))
    recorded, tree = _tree("b9084", tmp_path / "tree")
    argv = ["--registry", str(registry), "registry", "verify", "--source", str(tree.source), "D2"]
    assert main(argv) == 65
    out = capsys.readouterr().out
    # the file as this llama.cpp tree names it (ggml/src/…), though the entry writes ggml's layout
    assert ("D2.md: location.sites[0]: ggml/src/ggml-cuda/fattn-mma-f16.cuh: the line holding `__syncthreads();`: "
            "ambiguous: 2 candidates, line 1400 (after line 1355: `if (np > 1 && threadIdx.y % np == 0) {`); "
            "line 1425 (after line 1421: `} else if (np > 1) {`)") in out


def test_the_fork_holds_every_fact_and_each_site_at_the_line_recorded_for_its_commit(tmp_path, registry):
    """BeeLlama 775450a68 as the H200 verified it (56 facts, 0 mismatches), now from its evidence:
    every site found by its context at the line `at` records for that commit, but D17's two: the fork
    descends from D17's fix (24af22fc3), its ssm_scan_f32_group has no stateC, and verify says so."""
    recorded, tree = _tree_of("fork-775450a68-facts.json", tmp_path)
    reports = verify_entries(registry.entries, tree)
    assert _said(reports) == recorded["verify"]
    assert (sum(r.checked for r in reports), [f"{m.file}: {m.key}" for r in reports for m in r.mismatches]) == \
        (136, PAST_D17 + PAST_D19_IN_THE_FORK)
    placed = {(r.entry_id, s.key): (s.placement.at, s.placement.recorded) for r in reports for s in r.sites}
    assert placed == {
        ("D1", "location.sites[0]"): ("ggml/src/ggml-cuda/fattn.cu:380", 380),
        ("D2", "location.sites[0]"): ("ggml/src/ggml-cuda/fattn-mma-f16.cuh:1607", 1607),
        ("D7", "location.sites[0]"): ("ggml/src/ggml-cuda/fattn-mma-kvarn-case.cuh:178", 178),
        ("D7", "location.sites[1]"): ("ggml/src/ggml-cuda/fattn-mma-kvarn-case.cuh:245", 245),
        ("D7", "location.sites[2]"): ("ggml/src/ggml-cuda/fattn-mma-f16.cuh:1149", 1149),
        # past the three fixes: the lines are still there, at lines no run recorded
        ("D14", "location.sites[0]"): ("ggml/src/ggml-cuda/cpy.cu:78", None),
        ("D14", "location.sites[1]"): ("ggml/src/ggml-cuda/cpy.cu:89", None),
        ("D15", "location.sites[0]"): ("ggml/src/ggml-cuda/ssm-scan.cu:103", None),
        ("D15", "location.sites[1]"): ("ggml/src/ggml-cuda/ssm-scan.cu:104", None),
        ("D16", "location.sites[0]"): ("ggml/src/ggml-cuda/common.cuh:644", None),
        # past D17's fix: the lines are gone
        ("D17", "location.sites[0]"): (None, None),
        ("D17", "location.sites[1]"): (None, None),
        # inside D18's range (the fork merged 046e28443): every line there, none recorded for this commit
        ("D18", "location.sites[0]"): ("ggml/src/ggml-cuda/fattn-mma-f16.cuh:1750", None),
        ("D18", "location.sites[1]"): ("ggml/src/ggml-cuda/fattn-mma-f16.cuh:1279", None),
        ("D18", "location.sites[2]"): ("ggml/src/ggml-cuda/fattn-mma-f16.cuh:69", None),
        # past D19's fix in the fork (59afd3a20): the read is bounded, `sinks_f[c]`, so the line is gone
        ("D19", "location.sites[0]"): (None, None),
        # the fork has the vectorized gather (305ba519a) at the line recorded for ggml d99724f2, not for this commit
        ("D20", "location.sites[0]"): ("ggml/src/ggml-cuda/getrows.cu:127", None),
        # the conversion, after the cuBLAS refactor (74976e1ae) as in ggml d99724f2, at a line of its own
        ("D21", "location.sites[0]"): ("ggml/src/ggml-cuda/convert.cu:486", None),
        # the gather and test-backend-ops' initialisation, at the lines D22 records for this commit
        ("D22", "location.sites[0]"): ("ggml/src/ggml-cuda/getrows.cu:99", 99),
        ("D22", "location.sites[1]"): ("tests/test-backend-ops.cpp:2341", 2341),
        # MMQ's three loads, at the lines D23 records for this commit
        ("D23", "location.sites[0]"): ("ggml/src/ggml-cuda/mmq.cuh:1035", 1035),
        ("D23", "location.sites[1]"): ("ggml/src/ggml-cuda/mmq.cuh:1234", 1234),
        ("D23", "location.sites[2]"): ("ggml/src/ggml-cuda/mmq.cuh:1456", 1456),
    }
