"""Source facts that say "absent" ([[applies.source_facts]], ``absent_when_unlisted``), quoted in the verdict.

The trees are staged in tmp_path in ggml's standalone layout (``src/ggml-cuda/``, ``include/``, no
``tools/``), with the few lines each fact reads written as ggml has them: v0.9.7's dispatch
switch (no ``case 320:``, ``default: return BEST_FATTN_KERNEL_NONE;``) and v0.10.1's (with
it); ggml.h's type enum (no GGML_TYPE_Q2_0S in any ggml release). The real entries D1, D3, D6
and D8 are judged on builds whose test-backend-ops is the type_KV-era stand-in
(tests/scenarios/builds/backend_ops_type_kv_era.py): before these facts, each was inconclusive
("not exercised … nothing shows the defect absent") or skipped ("missing binary").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_helpers import REGISTRY
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.tree import ABSENT, FOUND, UNKNOWN, Tree

ROUTER_BEFORE_320 = """\
    switch (K->ne[0]) {
        case  40:
        case 256:
            if (V->ne[0] != K->ne[0]) {
                return BEST_FATTN_KERNEL_NONE;
            }
            break;
        default:
            return BEST_FATTN_KERNEL_NONE;
    }
"""
ROUTER_WITH_320 = ROUTER_BEFORE_320.replace("        default:", "        case 320:\n            break;\n        default:")
GGML_H = "enum ggml_type {\n    GGML_TYPE_F32     = 0,\n    GGML_TYPE_Q8_0    = 8,\n};\n"


@pytest.fixture(scope="module")
def registry():
    return load_registry(REGISTRY)


def ggml_tree(root: Path, router: str = ROUTER_BEFORE_320) -> Path:
    """A ggml standalone tree: the files the facts read, nothing else."""
    (root / "src" / "ggml-cuda").mkdir(parents=True)
    (root / "src" / "ggml-cuda" / "fattn.cu").write_text(router)
    (root / "include").mkdir()
    (root / "include" / "ggml.h").write_text(GGML_H)
    (root / "src" / "ggml.c").write_text('static const struct ggml_type_traits type_traits[] = {};\n')
    (root / "CMakeLists.txt").write_text("project(ggml C CXX)\n")
    return root


def build_on(kv, tree: Path) -> Path:
    return kv.build("backend_ops_type_kv_era", cache_extra={"CMAKE_HOME_DIRECTORY:INTERNAL": str(tree)})


def test_a_pattern_fact_is_found_quoted_absent_saying_where_or_unknown(tmp_path):
    tree = Tree(ggml_tree(tmp_path / "ggml", ROUTER_WITH_320))
    found = tree.pattern(("ggml/src/ggml-cuda/fattn.cu",), r"^\s*case 320:")
    assert (found.state, found.detail) == (FOUND, "src/ggml-cuda/fattn.cu:8: case 320:")
    absent = tree.pattern(("tools/server/CMakeLists.txt", "ggml/include/ggml.h"), r"GGML_TYPE_Q2_0S")
    assert (absent.state, absent.detail) == (ABSENT, "no line of include/ggml.h matches /GGML_TYPE_Q2_0S/; "
                                                     "no tools/server/CMakeLists.txt in the tree")
    assert Tree(None).pattern(("x",), "y").state == UNKNOWN


ABSENT_FROM_GGML = {
    "D1": ("the source has no head-size-320 route in the CUDA FlashAttention dispatch (a `case 320:` in fattn.cu, "
           "in ggml since f1134856, 2026-04-29): no line of src/ggml-cuda/fattn.cu matches /^\\s*case 320:/"),
    "D8": ("the source has no q2_0s type (GGML_TYPE_Q2_0S, a BeeLlama type): no line of include/ggml.h, src/ggml.c "
           "matches /\\bGGML_TYPE_Q2_0S\\b/"),
    # D3 was skipped here ("missing binary: llama-server"): the tree cannot build one
    "D3": ("the source has no llama-server target in the tree's CMake (`set(TARGET llama-server)` in "
           "tools/server/CMakeLists.txt): no tools/server/CMakeLists.txt, examples/server/CMakeLists.txt in the tree"),
}


@pytest.mark.parametrize("entry_id", sorted(ABSENT_FROM_GGML))
def test_an_entry_whose_source_fact_ggml_lacks_is_not_applicable_quoting_it(kv, registry, tmp_path, entry_id):
    o = kv.run(registry.get(entry_id), kv.target(build_on(kv, ggml_tree(tmp_path / "ggml")), sanitizer=None)).outcome
    assert o.verdict is Verdict.NOT_APPLICABLE, o.reason
    assert o.reason.startswith(ABSENT_FROM_GGML[entry_id])
    assert o.attempts == ()


def test_d1_on_a_tree_with_the_route_runs_its_cases(kv, registry, tmp_path):
    o = kv.run(registry.get("D1"), kv.target(build_on(kv, ggml_tree(tmp_path / "ggml", ROUTER_WITH_320)),
                                             sanitizer=None)).outcome
    assert o.attempts and o.verdict is Verdict.INCONCLUSIVE       # the stand-in lists no hsk=320 case
    assert "not exercised by this build's tests" in o.reason


def test_d3_on_a_llama_cpp_tree_without_the_binary_stays_skipped(kv, registry, tmp_path):
    tree = ggml_tree(tmp_path / "llama.cpp")
    (tree / "tools" / "server").mkdir(parents=True)
    (tree / "tools" / "server" / "CMakeLists.txt").write_text("set(TARGET llama-server)\nadd_executable(${TARGET})\n")
    o = kv.run(registry.get("D3"), kv.target(build_on(kv, tree), sanitizer=None)).outcome
    assert o.verdict is Verdict.SKIPPED and o.reason.startswith("missing binary: llama-server"), o.reason


def test_d6_where_no_case_has_a_quantized_k_with_softcap_is_not_applicable(kv, registry, tmp_path):
    """A tree between ggml 80fab560 and e4159ddd: softcap cases at hsk=128 only, all f16."""
    build = build_on(kv, ggml_tree(tmp_path / "ggml"))
    o = kv.run(registry.get("D6"), kv.target(build, sanitizer=None)).outcome
    assert o.verdict is Verdict.NOT_APPLICABLE, o.reason
    assert o.reason.startswith("no FLASH_ATTN_EXT test case matches /logit_softcap=[1-9][0-9.]*,.*type_KV=(q|iq)/ "
                               "in this build (0 cases): the claim is about test-backend-ops' own quantized-K "
                               "softcap cases")
    assert (build / "invocations.log").read_text().splitlines() == ["logit_softcap=[1-9][0-9.]*,.*type_KV=(q|iq)"]


def test_d6_with_quantized_softcap_cases_listed_but_too_few_run_is_not_turned_absent(kv, registry, tmp_path):
    """Only "none listed" is the source fact; a listed case that did not execute stays as before."""
    build = build_on(kv, ggml_tree(tmp_path / "ggml"))
    (build / "case-space.txt").write_text("hsk=128,hsv=128,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,"
                                          "max_bias=0.000000,logit_softcap=10.000000,prec=f32,type_KV=q8_0,"
                                          "permute=[0,1,2,3]\n")
    o = kv.run(registry.get("D6"), kv.target(build, sanitizer=None)).outcome
    assert o.verdict is Verdict.NOT_REPRODUCED, o.reason
