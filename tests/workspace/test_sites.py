"""A registry site found again by its context (kvdiag.workspace.sites), never by the nearest line.

The staged files are small kernels of our own written in the shape of D2's epilogue: a
barrier inside a branch whose guard differs between warps, a balancing barrier in the
else branch, and barriers elsewhere near the recorded line number.
"""

from __future__ import annotations

from kvdiag.workspace.sites import (
    AMBIGUOUS,
    CONFLICT,
    FOUND,
    NOT_FOUND,
    UNPLACED,
    SiteSpec,
    block_end,
    locate,
    place,
)

GUARD = "if (np > 1 && threadIdx.y % np == 0) {"
BARRIER = SiteSpec("k.cuh", "__syncthreads();", GUARD, at={"aaaa111": 9})

EPILOGUE = """\
__device__ void tile(int np) {
    __syncthreads();
    load();
    __syncthreads();
    if (np > 1 && threadIdx.y % np == 0) {
        for (int i = 0; i < 4; ++i) {
            combine(i);   // a brace in a comment: }
        }
        __syncthreads();
        write_back("}");
    } else if (np > 1) {
        __syncthreads();
    }
    __syncthreads();
}
"""


def _moved(text: str, n: int) -> str:
    return "\n".join(f"// added line {i}" for i in range(n)) + "\n" + text


def test_the_barrier_inside_the_guarded_branch_is_found_not_the_balancing_one():
    found = locate(BARRIER, EPILOGUE)
    assert (found.state, found.line) == (FOUND, 9)
    assert found.candidates[0].context == f"in the block of line 5: `{GUARD}`"


def test_a_site_whose_lines_moved_is_found_at_its_new_line():
    assert locate(BARRIER, _moved(EPILOGUE, 40)).line == 49


def test_context_is_matched_ignoring_whitespace():
    reformatted = EPILOGUE.replace(GUARD, "if(np>1&&threadIdx.y%np==0){").replace("        __syncthreads();\n        write",
                                                                               "        __syncthreads ( ) ;\n        write")
    assert locate(BARRIER, reformatted).line == 9


def test_when_the_guarded_barrier_is_gone_it_is_not_found_whatever_is_near_the_old_line():
    """The old verify named the barriers nearest the recorded number; one was the balancing one."""
    fixed = EPILOGUE.replace("        __syncthreads();\n        write_back", "        write_back")
    found = locate(BARRIER, fixed)
    assert found.state == NOT_FOUND and found.line is None
    assert found.why == "`__syncthreads();` is not in the block of the anchor (line 5)"


def test_two_anchors_that_lead_to_two_lines_are_ambiguous_with_each_candidates_context():
    twice = EPILOGUE + EPILOGUE.replace("tile(", "tile2(")
    found = locate(BARRIER, twice)
    assert found.state == AMBIGUOUS and [c.line for c in found.candidates] == [9, 24]
    assert found.describe() == (f"ambiguous: 2 candidates, line 9 (in the block of line 5: `{GUARD}`); "
                                f"line 24 (in the block of line 20: `{GUARD}`)")


def test_an_absent_anchor_is_not_found_and_says_so():
    found = locate(SiteSpec("k.cuh", "__syncthreads();", "if (np > 2) {"), EPILOGUE)
    assert found.state == NOT_FOUND and found.why == "no line holds the anchor `if (np > 2) {`"


def test_without_an_anchor_a_unique_text_is_found_and_a_common_one_is_ambiguous():
    assert locate(SiteSpec("k.cuh", 'write_back("}");'), EPILOGUE).line == 10
    common = locate(SiteSpec("k.cuh", "__syncthreads();"), EPILOGUE)
    assert common.state == AMBIGUOUS and [c.line for c in common.candidates] == [2, 4, 9, 12, 14]
    assert str(common.candidates[3]) == "line 12 (after line 11: `} else if (np > 1) {`)"


def test_braces_in_comments_and_strings_do_not_close_the_block():
    lines = EPILOGUE.splitlines()
    assert block_end(lines, 4) == 10            # the `} else if` line, not the comment's or the string's brace


def test_an_anchor_that_opens_no_block_searches_its_enclosing_block():
    spec = SiteSpec("k.cuh", "__syncthreads();", "load();")
    assert locate(spec, EPILOGUE).line == 4
    assert locate(SiteSpec("k.cuh", "__syncthreads();", "write_back("), EPILOGUE).state == NOT_FOUND


def test_the_source_decides_and_a_record_that_disagrees_is_a_conflict():
    text = _moved(EPILOGUE, 3)
    same = place(BARRIER, "ggml/k.cuh", locate(BARRIER, EPILOGUE), "aaaa111")
    assert (same.state, same.at, same.how, same.recorded) == (FOUND, "ggml/k.cuh:9", "by its context", 9)
    moved = place(BARRIER, "ggml/k.cuh", locate(BARRIER, text), "aaaa111")
    assert (moved.state, moved.line, moved.recorded) == (CONFLICT, 12, 9)
    assert moved.detail == "its context leads to line 12, but line 9 is recorded for aaaa111"
    other = place(BARRIER, "ggml/k.cuh", locate(BARRIER, text), "bbbb222")
    assert (other.state, other.line, other.recorded) == (FOUND, 12, None)


def test_a_record_only_picks_among_the_candidates_its_context_gave():
    bare = SiteSpec("k.cuh", "__syncthreads();", at={"aaaa111": 9, "bbbb222": 8})
    picked = place(bare, "k.cuh", locate(bare, EPILOGUE), "aaaa111")
    assert (picked.state, picked.line, picked.how) == (FOUND, 9, "recorded for aaaa111")
    assert picked.detail == "its context is ambiguous here (5 candidates)"
    not_a_candidate = place(bare, "k.cuh", locate(bare, EPILOGUE), "bbbb222")
    assert not_a_candidate.state == AMBIGUOUS and not_a_candidate.line is None


def test_without_a_source_the_record_for_this_commit_stands_alone_or_nothing_is_placed():
    assert place(BARRIER, None, None, "aaaa1111234").at == "k.cuh:9"
    unplaced = place(BARRIER, None, None, "cccc333")
    assert unplaced.state == UNPLACED and "no line recorded for commit cccc333 (recorded: 9 at aaaa111)" in unplaced.detail


def test_the_older_line_and_commit_keys_read_as_one_record():
    spec = SiteSpec.from_table({"file": "k.cuh", "line": 1538, "holds": "__syncthreads();", "commit": "d99724f2"})
    assert spec.at == {"d99724f2": 1538} and spec.anchor is None
    assert spec.recorded_for("d99724f2b141fed9") == ("d99724f2", 1538) and spec.recorded_for("d99") == ("d99724f2", 1538)
    assert spec.recorded_for(None) is None and spec.recorded_for("775450a68") is None


def test_an_absent_function_is_said_absent_from_the_files_as_this_tree_names_them(tmp_path):
    """An entry written against ggml's layout (src/ggml-cuda/…) checked on a llama.cpp tree (ggml/src/…)
    before the function existed: the answer names the file the tree has, not the entry's spelling."""
    from kvdiag.workspace.tree import ABSENT, Tree

    cuda = tmp_path / "ggml" / "src" / "ggml-cuda"
    cuda.mkdir(parents=True)
    (cuda / "cpy.cu").write_text("static __global__ void cpy_flt(const char * cx) {}\n")
    tree = Tree.open(tmp_path, commit="0" * 40)
    said = tree.function("cpy_scalar_transpose", ("src/ggml-cuda/cpy.cu",))
    assert said.state == ABSENT
    assert said.detail == "cpy_scalar_transpose not in ggml/src/ggml-cuda/cpy.cu"
    gone = tree.function("cpy_scalar_transpose", ("src/ggml-cuda/gone.cu",))
    assert gone.detail == "cpy_scalar_transpose not in the tree (no src/ggml-cuda/gone.cu here)"
