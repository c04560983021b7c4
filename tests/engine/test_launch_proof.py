"""The launch-proof gate (kvdiag.engine.evidence.launch_proof) on recorded device output and staged symbol listings.

Device output: one batch of D2's scan on an H200 (ggml d99724f2, tests/fixtures/device/
h200x2-ggml-session3/batch-on-a-terminal.stdout.log.gz): 9 cases, 3 affected, 6 clean, run by
the build's own test-backend-ops, so no launch lines. Symbol listings: `cuobjdump -symbols`
(with c++filt) and `nm -C` of a stand-in library built here with nvcc 13 from
tests/fixtures/symbols/standin-fattn-kernels.cu, with and without the <256, 256, 4, 4> kernel
(tests/fixtures/symbols/README.md). Launch lines are the launch probe's format, with names
as the C++ demangler prints them (the c++filt fixture is that demangler's real output).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kvdiag.controls.gate import Gate
from kvdiag.engine.verdict.presence import built_without as _built_without
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.launch_proof import LaunchContext, entry_kernels, judge_launch
from kvdiag.engine.evidence.observe import observe_segment
from kvdiag.engine.verdict.presence import after_running
from kvdiag.engine.scan.cases import scan_step
from kvdiag.engine.scan.batch import batch_step
from kvdiag.records.verdict import Verdict
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.launches import parse_launches
from kvdiag.parse.symbols import demangled_kernels, nm_kernels
from kvdiag.parse.text import strip_ansi
from kvdiag.records.ranges import RangeEvidence
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.kernel_symbols import KernelSymbols

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BATCH = FIXTURES / "device" / "h200x2-ggml-session3" / "batch-on-a-terminal.stdout.log.gz"
SYMBOLS = FIXTURES / "symbols"
PASSED = Gate(True, "synccheck control passed on this machine (test)")
K44 = "flash_attn_ext_f16<256, 256, 4, 4, false, false>"


def listing(name: str, tool: str = "cuobjdump") -> KernelSymbols:
    if tool == "cuobjdump":
        kernels = demangled_kernels((SYMBOLS / f"{name}.cxxfilt.txt").read_text())
    else:
        kernels = nm_kernels((SYMBOLS / f"{name}.nm-C.txt").read_text())
    return KernelSymbols(f"lib-{name}.so", tool, kernels)


@pytest.fixture(scope="module")
def d2():
    return load_registry().get("D2")


@pytest.fixture(scope="module")
def batch():
    text = strip_ansi(gzip.open(BATCH, "rt", errors="replace").read())
    return text, split_cases(text, "synccheck")


def judge_recorded(d2, batch, context: LaunchContext):
    text, split = batch
    step = batch_step(scan_step(d2))
    out = {}
    for segment in split.segments:
        obs = observe_segment(step, text, split, segment)
        out[segment.case.params] = judge_attempt(d2, obs, PASSED, 1, 0.0, launch=context)
    return out


def test_recorded_clean_cases_without_launch_lines_stay_not_reproduced_and_say_the_launch_is_unproven(d2, batch):
    judged = judge_recorded(d2, batch, LaunchContext(symbols=lambda: listing("fattn-standin"), per_case=True))
    verdicts = sorted(a.verdict.value for a in judged.values())
    assert verdicts == ["confirmed"] * 3 + ["not-reproduced"] * 6
    clean = [a for a in judged.values() if a.verdict is Verdict.NOT_REPRODUCED]
    assert all("launch not proven: launches were not listed in this run (6 kernel symbol(s) in "
               "lib-fattn-standin.so (cuobjdump))" in a.reason for a in clean)


def test_a_build_without_any_kernel_of_the_family_makes_the_clean_cases_not_applicable(d2, batch):
    """The staged build has no flash_attn_ext_f16 kernel at all: the confirmed cases stay
    confirmed (their findings are this run's), the clean ones cannot have the defect."""
    empty = KernelSymbols("lib-other.so", "cuobjdump", ("plain_kernel", "flash_attn_stream_k_fixup<256, 4, 4>"))
    judged = judge_recorded(d2, batch, LaunchContext(symbols=lambda: empty, per_case=True))
    clean = [a for a in judged.values() if a.verdict is not Verdict.CONFIRMED]
    assert len(clean) == 6 and all(a.verdict is Verdict.NOT_APPLICABLE for a in clean)
    assert "this build contains no kernel the entry is about (kernels matching /^flash_attn_ext_f16/): " \
           "2 kernel symbol(s) in lib-other.so (cuobjdump)" in clean[0].reason


def launch_text(*names: str) -> str:
    return "".join(f"kvdiag-launch: void {n}(char const*, char const*, float, int)\n" for n in names)


@pytest.mark.parametrize("tool", ["cuobjdump", "nm"])
def test_the_entrys_kernel_launched_is_not_reproduced_naming_it(d2, tool):
    j = judge_launch(d2, parse_launches(launch_text(K44)), True,
                     LaunchContext(symbols=lambda: listing("fattn-standin", tool)), tool="synccheck")
    assert j.verdict is None and j.text == f"launched under synccheck: {K44}"


def test_radius_kernels_of_this_commit_are_what_the_entry_is_about(d2):
    import dataclasses

    entry = dataclasses.replace(d2, radius=({"commit": "749f688fcaa4", "kernels": [K44]},))
    assert entry_kernels(entry, "749f688fcaa4c472ec034b08cb8a907c45cfaa02").exact == (K44,)
    assert entry_kernels(entry, "775450a68").patterns == ("^flash_attn_ext_f16",)   # another tree's radius
    other = "flash_attn_ext_f16<256, 256, 8, 1, false, false>"
    j = judge_launch(entry, parse_launches(launch_text(other)), True,
                     LaunchContext(symbols=lambda: listing("fattn-standin"), commit="749f688fcaa4"), tool="synccheck")
    assert j.verdict is Verdict.INCONCLUSIVE
    assert j.text == (f"none of the radius' kernels ({K44}) launched in this run (launched: {other}; "
                      f"1 compiled ({K44}), by cuobjdump)")


def test_a_build_without_the_instantiation_is_not_applicable_quoting_the_symbol_check(d2):
    import dataclasses

    entry = dataclasses.replace(d2, radius=({"commit": "749f688fcaa4", "kernels": [K44]},))
    for tool in ("cuobjdump", "nm"):
        j = judge_launch(entry, parse_launches(launch_text("flash_attn_ext_f16<256, 256, 8, 1, false, false>")),
                         True, LaunchContext(symbols=lambda: listing("fattn-standin-without", tool),
                                             commit="749f688fcaa4"), tool="synccheck")
        assert j.verdict is Verdict.NOT_APPLICABLE
        assert j.text.startswith(f"this build contains no kernel the entry is about (the radius' kernels ({K44})): ")
        assert "lib-fattn-standin-without.so" in j.text


def test_compiled_but_not_launched_is_inconclusive_for_a_run_and_not_applicable_for_a_scan_case(d2):
    launched = parse_launches(launch_text("k_get_rows_float<float, float>"))
    symbols = LaunchContext(symbols=lambda: listing("fattn-standin")).symbols
    run = judge_launch(d2, launched, True, LaunchContext(symbols=symbols), tool="synccheck")
    assert run.verdict is Verdict.INCONCLUSIVE
    assert run.text.startswith("none of kernels matching /^flash_attn_ext_f16/ launched in this run "
                               "(launched: k_get_rows_float<float, float>; 4 compiled (")
    case = judge_launch(d2, launched, True, LaunchContext(symbols=symbols, per_case=True), tool="synccheck")
    assert case.verdict is Verdict.NOT_APPLICABLE
    assert case.text == "this case launched no kernel the entry is about (launched: k_get_rows_float<float, float>)"


def test_nothing_launched_and_nothing_listed_is_inconclusive_never_not_reproduced(d2):
    j = judge_launch(d2, (), True, LaunchContext(symbols=lambda: KernelSymbols(None, None, why_not="no library")),
                     tool="synccheck")
    assert j.verdict is Verdict.INCONCLUSIVE and "launched: no kernel; symbols not listed" in j.text


# ------------------------------------------------------------------ the gate inside an affected range

INSIDE = RangeEvidence("affected", "introduced 0, no fix an ancestor of 749f688fcaa4", head="749f688fcaa4")


def judge_in_range(d2, batch, context: LaunchContext, listed: bool) -> list:
    text, split = batch
    step = batch_step(scan_step(d2))
    return [judge_attempt(d2, observe_segment(step, text, split, segment, listed), PASSED, 1, 0.0,
                          presence=INSIDE, launch=context) for segment in split.segments]


def test_inside_a_range_a_build_without_the_kernel_stays_not_applicable_naming_the_range(d2, batch):
    """The symbols are build evidence that the defect's code cannot run here, whatever the history
    says: the one not-applicable a range does not overturn (engine.verdict.presence), with a warning."""
    empty = KernelSymbols("lib-other.so", "cuobjdump", ("plain_kernel",))
    clean = [a for a in judge_in_range(d2, batch, LaunchContext(symbols=lambda: empty), listed=False)
             if a.verdict is not Verdict.CONFIRMED]
    assert len(clean) == 6 and all(a.verdict is Verdict.NOT_APPLICABLE for a in clean)
    assert clean[0].reason.endswith(f"; {INSIDE.summary}")
    assert _built_without(clean)
    verdict, reason, warnings = after_running(Verdict.NOT_APPLICABLE, clean[0].reason, [], INSIDE,
                                              built_without=_built_without(clean))
    assert verdict is Verdict.NOT_APPLICABLE and reason == clean[0].reason
    assert warnings == [f"{INSIDE.summary}, but this build compiled no kernel the entry is about"]


def test_inside_a_range_a_source_not_applicable_is_still_inconclusive(d2):
    """Without the symbol evidence, a not-applicable reached inside a range is the disagreement."""
    verdict, reason, _ = after_running(Verdict.NOT_APPLICABLE, "the compile step's source file is absent", [],
                                       INSIDE, built_without=False)
    assert verdict is Verdict.INCONCLUSIVE and reason.startswith(f"{INSIDE.summary}, but the compile step's source")


def test_inside_a_range_a_kernel_compiled_but_not_launched_is_inconclusive(d2, batch):
    judged = judge_in_range(d2, batch, LaunchContext(symbols=lambda: listing("fattn-standin")), listed=True)
    clean = [a for a in judged if a.verdict is not Verdict.CONFIRMED]
    assert len(clean) == 6 and all(a.verdict is Verdict.INCONCLUSIVE for a in clean)
    assert "none of kernels matching /^flash_attn_ext_f16/ launched in this run" in clean[0].reason
    assert not _built_without(clean)


def test_a_listing_is_matched_against_the_entry_once_whatever_the_cases(d2):
    """A route phase asks for every case that reached none of the entry's kernels (902 for D2 over hsk);
    matching ggml's 6201 kernels took 4.6 ms a case, so the answer is kept per listing and entry."""
    from kvdiag.engine.evidence import launch_proof

    launch_proof._compiled_kernels.cache_clear()
    symbols = listing("fattn-standin")
    launched = parse_launches(launch_text("k_get_rows_float<float, float>"))
    context = LaunchContext(symbols=lambda: symbols, per_case=True)
    texts = {judge_launch(d2, launched, True, context, tool="synccheck").text for _ in range(50)}
    info = launch_proof._compiled_kernels.cache_info()
    assert (info.misses, info.hits) == (1, 49)
    assert texts == {"this case launched no kernel the entry is about (launched: k_get_rows_float<float, float>)"}
    again = KernelSymbols(symbols.library, symbols.tool, symbols.kernels[:-1])    # another listing: its own answer
    judge_launch(d2, launched, True, LaunchContext(symbols=lambda: again, per_case=True), tool="synccheck")
    assert launch_proof._compiled_kernels.cache_info().misses == 2


def test_a_listing_that_cannot_be_a_key_is_matched_each_time(d2):
    from types import SimpleNamespace

    unhashable = SimpleNamespace(kernels=["flash_attn_ext_f16<64, 64, 8, 1, false, false>"], listed=True,
                                 tool="stand-in", describe=lambda: "a stand-in listing")
    unhashable.__hash__ = None
    launched = parse_launches(launch_text("k_get_rows_float<float, float>"))
    j = judge_launch(d2, launched, True, LaunchContext(symbols=lambda: unhashable, per_case=True), tool="synccheck")
    assert j.verdict is Verdict.NOT_APPLICABLE
