"""`kvdiag scan` through the launch probe's program, on the staged case space (backend_ops_case_space.py).

The stand-in plays both programs: the build's own test-backend-ops and, handed to the target
as its `probe_program`, the probe's build of it (`launch` mode, launch lines under
KVDIAG_PRINT_LAUNCHES). The same space is scanned both ways, batched; the tests compare the
verdicts case by case, check that the probe's path ran in launch mode with launches listed, and
read the instantiation groups (affected, clean, never reached) and the launch-proof gate's
words from the scan.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine_helpers import ALLOWED
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.cases import scan
from kvdiag.engine.scan.kernels import group_by_kernel
from kvdiag.records.verdict import Verdict
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.report.scan_formats import render_scan_markdown, render_scan_sarif
from kvdiag.report.scan_text import render_scan
from kvdiag.store.runs import RunDir
from kvdiag.workspace.kernel_symbols import KernelSymbols
from test_scan import CRASH, DIVERGING, HANG, OK_CASES, scan_scenarios, stage_space

K44 = "flash_attn_ext_f16<256, 256, 4, 4, false, false>"
K81 = "flash_attn_ext_f16<256, 256, 8, 1, false, false>"
TILE44 = "flash_attn_ext_f16_process_tile<256, 256, 4, 4, 2, false, false, false, true>"
NEVER = "flash_attn_ext_f16<128, 128, 8, 1, false, false>"


def provider(tool):
    return no_sanitizer_gate(tool) if tool is None else ALLOWED


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    with scan_scenarios(tmp_path_factory, "scan-launch", "D921") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"))
        program = build / "bin" / "test-backend-ops"
        listing = KernelSymbols("libggml-cuda.so", "cuobjdump -symbols | c++filt", (K44, K81, NEVER))
        probe = dataclasses.replace(target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", program),
                                    kernel_symbols=lambda: listing)
        plain = scan(entry, target, RunDir(root / "plain"), space=space, workers=2, gate_provider=provider, batch=0)
        modes_plain = (build / "modes.log").read_text().split()
        launch = scan(entry, probe, RunDir(root / "launch"), space=space, workers=2, gate_provider=provider, batch=0)
        modes_all = (build / "modes.log").read_text().split()
        yield entry, plain, launch, modes_plain, modes_all[len(modes_plain):], listing


def test_the_launch_path_gives_the_same_verdict_for_every_case(both):
    _, plain, launch, *_ = both
    assert {p: a.verdict for p, a in launch.results.items()} == {p: a.verdict for p, a in plain.results.items()}
    assert {p for p, _ in launch.affected} == set(DIVERGING)
    assert {p for p, _ in launch.by_verdict(Verdict.INCONCLUSIVE)} == {HANG, CRASH}


def test_the_probe_program_runs_in_launch_mode_and_lists_launches(both):
    _, plain, launch, modes_plain, modes_launch, _ = both
    assert set(modes_plain) == {"test"} and set(modes_launch) == {"launch"}
    for params in OK_CASES:
        ev = launch.results[params].evidence
        assert ev.launch_listing == "launch probe" and len(ev.launched) == 1
        assert not plain.results[params].evidence.launched


def test_a_clean_case_names_the_kernel_that_ran_under_the_detector(both):
    _, _, launch, *_ = both
    a = launch.results[OK_CASES[0]]
    assert a.verdict is Verdict.NOT_REPRODUCED
    assert a.reason.endswith(f"launched under synccheck: {K44}")
    assert a.evidence.launch_proof == f"launched under synccheck: {K44}"


def test_without_listed_launches_a_clean_case_says_the_launch_was_not_proven(both):
    _, plain, *_ = both
    a = plain.results[OK_CASES[0]]
    assert "launch not proven: launches were not listed in this run" in a.reason


def test_instantiations_are_grouped_affected_clean_and_never_reached(both):
    entry, _, launch, _, _, listing = both
    groups = group_by_kernel(launch.results, patterns=("^flash_attn_ext_f16",), compiled=listing.kernels,
                             listing=listing.describe())
    affected = {row["instantiation"]: row for row in groups["affected"]}
    assert {K44, K81, TILE44} <= set(affected)
    assert affected[K44]["values"]["nr23"] == ["[4,1]"] and affected[K44]["values"]["nb"] == ["3"]
    assert affected[K44]["cases"] == 2 and affected[K81]["cases"] == 2
    assert groups["clean"] == []           # every kernel that ran clean also diverged in another case
    assert groups["never_reached"] == [NEVER]
    assert groups["launch_listed_cases"] == len(launch.results)     # the hang and the crash too, run alone


def test_text_markdown_and_sarif_show_the_instantiations(both):
    entry, _, launch, _, _, listing = both
    launch.kernels = group_by_kernel(launch.results, patterns=("^flash_attn_ext_f16",), compiled=listing.kernels,
                                     listing=listing.describe())
    text = render_scan(launch, Path("/run"))
    assert f"  affected     2  {K44}  hsk=256 hsv=256 nr23=[4,1] nb=3 type_K=f16 type_V=f16" in text
    assert f"  never reached   {NEVER}" in text
    md = render_scan_markdown(launch, entry)
    assert f"| affected | 2 | `{K44}` |" in md and f"| never reached | 0 | `{NEVER}` | |" in md
    sarif = render_scan_sarif(launch, entry)
    assert f'"instantiation": "{K44}"' in sarif and '"never_reached": [' in sarif


def test_the_scans_sarif_is_valid_sarif_2_1_0(both):
    jsonschema = pytest.importorskip("jsonschema")
    import json

    entry, _, launch, _, _, listing = both
    launch.kernels = group_by_kernel(launch.results, patterns=("^flash_attn_ext_f16",), compiled=listing.kernels,
                                     listing=listing.describe())
    schema = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "schemas" /
                         "sarif-schema-2.1.0.json").read_text())
    doc = json.loads(render_scan_sarif(launch, entry))
    jsonschema.Draft4Validator(schema).validate(doc)
    assert {r["properties"]["instantiation"] for r in doc["runs"][0]["results"]} >= {K44, K81}


@dataclasses.dataclass(frozen=True)
class _Target:
    probe_program: object = None
    build: object = None
    launch_lister: object = None


def test_the_scan_chooses_the_probes_program_or_says_why_not(d2):
    from kvdiag.engine.scan.session import choose_program
    from kvdiag.progress import Progress

    said = []
    progress = Progress()
    progress.say = said.append
    made = _Target(probe_program=lambda: ProbeProgram("test-backend-ops-launch", Path("/h/p/test-backend-ops"),
                                                      reused=True))
    target, record = choose_program(made, "auto", d2, progress)
    assert target is made and record["path"] == "launch" and record["probe"]["reused"] is True
    assert record["why"] is None     # every record has every key: the H200's scan text failed on a missing why
    assert said[-1].endswith("cases run in launch mode (GPU only, no CPU reference), every kernel launch listed")
    failed = _Target(probe_program=lambda: ProbeProgram("test-backend-ops-launch", why_not="not a ninja build"))
    target, record = choose_program(failed, "auto", d2, progress)
    assert target.probe_program is None and record == {"path": "plain", "why": "not a ninja build",
                                                        "probe": failed.probe_program().to_dict()}
    assert said[-1] == "running the build's own test-backend-ops: no test-backend-ops-launch program: not a ninja build"
    target, record = choose_program(made, "plain", d2, progress)
    assert target.probe_program is None and record == {"path": "plain", "why": "--program plain", "probe": None}


def test_without_params_the_scan_walks_the_radius_of_the_tree_at_hand(d2):
    from types import SimpleNamespace

    from kvdiag.engine.scan.session import scan_space

    at = lambda commit: _Target(build=SimpleNamespace(git=SimpleNamespace(commit=commit)))   # noqa: E731
    def regexes(*commits):
        return [r for t in d2.radius if str(t["commit"]).startswith(commits) for r in t["params"]]

    upstream, fork = "749f688fcaa4c472ec034b08cb8a907c45cfaa02", "775450a688437e8e9d32bb77ae466f7acb5d3577"
    op, params, source = scan_space(d2, at(upstream), None, None)
    assert op == "FLASH_ATTN_EXT" and source.startswith("the measured radius (")
    assert all(r in params for r in regexes(upstream)) and not any(r in params for r in regexes(fork)
                                                                     if r not in regexes(upstream))
    assert "hsk=576" in params                     # the whole-op radius measured on upstream (H200, session 5)
    _, both, source = scan_space(d2, at("da09cae5a50f"), None, None)      # a tree no radius was measured on
    assert all(r in both for r in regexes(upstream, fork)) and "BeeLlama fork" in source
    assert scan_space(d2, at(None), None, "hsk") == ("FLASH_ATTN_EXT", "hsk", "--params")
    bare = dataclasses.replace(d2, radius=())
    assert scan_space(bare, at(None), None, None) == ("FLASH_ATTN_EXT", "hsk=256", "the entry's [scan]")
