"""A case described once, found on every era's test-backend-ops (kvdiag.parse.case_format, engine.verdict.plan).

Before ggml 6976b270 (2026-05-01) a FLASH_ATTN_EXT case printed ``type_KV=f16``; the registry
writes ``type_K=f16,type_V=f16``. The real cases come from the recorded H200 run of every
FLASH_ATTN_EXT case on d99724f2 (tests/fixtures/transcripts), rewritten the way that older
``VARS_TO_STR13(..., prec, type_KV, permute)`` prints them; the stand-in program of that era is
tests/scenarios/builds/backend_ops_type_kv_era.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import re

import pytest

from engine_helpers import ALLOWED, REGISTRY, SCENARIO_BUILDS, TRANSCRIPTS, fake_gpu
from kvdiag.engine.verdict.plan import adapt_entry
from kvdiag.records.verdict import Verdict
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.case_format import JOINED, SPLIT, CaseFormat, adapt_regex
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.backend_ops import program_kv_types

D2_OLD_ERA = ("hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,"
              "logit_softcap=0.000000,prec=f32,type_KV=f16,permute=[0,1,2,3]")


def recorded_cases() -> list[str]:
    with gzip.open(TRANSCRIPTS / "test-backend-ops-fa-all-nosanitizer.log.gz", "rt") as fh:
        return [c.params for c in parse_backend_ops(fh.read()).cases if c.op == "FLASH_ATTN_EXT"]


def in_the_older_form(case: str) -> str | None:
    """The same case as a test-backend-ops before 6976b270 prints it (None: it has no such case, K != V)."""
    pair = re.search(r"type_K=([^,]+),type_V=([^,]+),", case)
    if pair.group(1) != pair.group(2):
        return None
    case = case.replace(pair.group(0), f"type_KV={pair.group(1)},")
    return re.sub(r",kv_view=\d,v_is_view_of_k=\d$", "", case)


def registry_case_regexes() -> dict[str, str]:
    """Every FLASH_ATTN_EXT case regex of the registry, by where it is written."""
    found = {}
    for entry in load_registry(REGISTRY).entries:
        for step in entry.steps:
            if step.vars.get("op") == "FLASH_ATTN_EXT":
                found[f"{entry.id} step {step.name}"] = step.vars["params"]
        if entry.scan and entry.scan.op == "FLASH_ATTN_EXT":
            found[f"{entry.id} [scan]"] = entry.scan.params
        if entry.drift and entry.drift.op == "FLASH_ATTN_EXT":
            found[f"{entry.id} [drift]"] = entry.drift.params
        for m in entry.signature:
            if m.type == "case" and m.params:
                found[f"{entry.id} case matcher"] = m.params
        for i, table in enumerate(entry.radius):
            for j, regex in enumerate(table.get("params") or ()):
                found[f"{entry.id} radius {i} params {j}"] = regex
    return found


def test_every_registry_regex_selects_the_same_recorded_cases_in_either_era():
    cases = [(c, in_the_older_form(c)) for c in recorded_cases()]
    assert len(cases) == 5158
    pairs = [(new, old) for new, old in cases if old is not None]
    regexes = registry_case_regexes()
    assert {"D2 step fast", "D6 step fast", "D8 step fast", "D8 case matcher", "D2 radius 0 params 0"} <= set(regexes)
    selected_anywhere = 0
    for where, regex in regexes.items():
        as_written = [new for new, _ in pairs if re.search(regex, new)]
        adapted = adapt_regex(regex, JOINED)
        in_old_era = [new for new, old in pairs if re.search(adapted, old)]
        assert in_old_era == as_written, where
        assert [new for new, _ in pairs if re.search(adapt_regex(adapted, SPLIT), new)] == as_written, where
        selected_anywhere += len(as_written)
    assert selected_anywhere > 1000
    # without the mapping the older era's strings are not selected at all
    assert not [old for _, old in pairs if re.search(regexes["D2 step fast"], old)]


def test_the_mapping_is_idempotent_and_leaves_an_asymmetric_pair_alone():
    written = r"logit_softcap=[1-9][0-9.]*,.*type_K=(q|iq)"
    once = adapt_regex(written, JOINED)
    assert once == r"logit_softcap=[1-9][0-9.]*,.*type_KV=(q|iq)"
    assert adapt_regex(once, JOINED) == once
    assert adapt_regex("type_K=f16,type_V=q8_0", JOINED) == "type_K=f16,type_V=q8_0"
    assert adapt_regex(written, None) == written
    assert CaseFormat(JOINED).adapt_dimensions(("hsk", "type_K", "type_V", "nb")) == ("hsk", "type_KV", "nb")


def test_the_program_itself_says_which_era_it_prints(tmp_path):
    assert program_kv_types(SCENARIO_BUILDS / "backend_ops_type_kv_era.py") == JOINED
    assert program_kv_types(SCENARIO_BUILDS / "backend_ops_case_space.py") == SPLIT
    assert program_kv_types(SCENARIO_BUILDS / "backend_ops_no_cases.py") is None
    assert program_kv_types(tmp_path / "absent") is None


def test_an_entry_is_rewritten_once_where_it_meets_the_build(d2):
    adapted = adapt_entry(d2, CaseFormat(JOINED))
    assert "type_KV=f16" in adapted.default_step.vars["params"]
    assert adapted.scan.dimensions == ("hsk", "hsv", "nr23", "nb", "type_KV")
    radius = [r for t in adapted.radius for r in t["params"]]
    assert any("type_KV=" in r for r in radius)
    assert not [r for r in radius if re.search(r"type_K=(\w+),type_V=\1\b", r)]   # only asymmetric pairs stay
    assert adapt_entry(adapted, CaseFormat(JOINED)) is adapted
    assert adapt_entry(d2, CaseFormat(None)) is d2


@pytest.fixture
def old_era(kv):
    build = kv.build("backend_ops_type_kv_era")
    return build, kv.target(build, sanitizer=kv.sanitizer())


def test_run_d2_on_an_older_era_build_selects_and_confirms_its_case(kv, d2, old_era):
    """The issue's tarball: `kvdiag run D2` was inconclusive with 0 cases; its case is there as type_KV=f16."""
    build, target = old_era
    r = kv.run(d2, target)
    assert r.outcome.verdict is Verdict.CONFIRMED, r.outcome.reason
    sent = (build / "invocations.log").read_text().splitlines()
    assert sent and all("type_KV=f16" in p and "type_K=" not in p for p in sent)
    assert re.search(sent[0], D2_OLD_ERA)
    assert any("type_KV=" in w and "6976b270" in w for w in r.outcome.warnings)


def test_scan_d2_finds_the_case_run_confirms(kv, d2, old_era, monkeypatch):
    import kvdiag.engine.scan.session as session

    real = session.prepare_target

    def with_a_gpu(*args, **kwargs):
        target = real(*args, **kwargs)
        return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=fake_gpu()))

    monkeypatch.setattr(session, "prepare_target", with_a_gpu)
    monkeypatch.setattr(session, "controls_gate_provider", lambda *a: lambda tool: ALLOWED)
    build, _ = old_era
    result = session.run_scan(d2, build, jobs=1, op=None, params=None, limit=None, sanitizer=kv.sanitizer(),
                              route=False, program="plain")
    verdicts = {case: a.verdict for case, a in result.results.items()}
    assert verdicts[D2_OLD_ERA] is Verdict.CONFIRMED
    assert "type_KV=f16" in result.space.params
    assert not re.search(r"type_K=(\w+),type_V=\1\b", result.space.params)


def test_d6_runs_the_quantized_softcap_cases_an_older_era_names_type_KV(kv, old_era):
    build, target = old_era
    softcap_q8 = ("hsk=128,hsv=128,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,"
                  "logit_softcap=10.000000,prec=f32,type_KV=q8_0,permute=[0,1,2,3]")
    (build / "case-space.txt").write_text(softcap_q8 + "\n" + D2_OLD_ERA + "\n")
    d6 = load_registry(REGISTRY).get("D6")
    r = kv.run(d6, target)
    assert r.outcome.attempts[0].evidence.cases_executed == 1
    assert r.outcome.verdict is Verdict.NOT_REPRODUCED, r.outcome.reason


def test_a_run_that_confirms_nothing_keeps_the_site_placed_by_context(kv, d2, tmp_path):
    """What the report quotes (report.where): the run places D2's site in its tree whatever the verdict."""
    from tree_stand_in import listing, stand_in

    source, _ = stand_in(listing("llama-b9084-facts.json"), tmp_path / "tree")
    build = kv.build("backend_ops_type_kv_era", cache_extra={"CMAKE_HOME_DIRECTORY:INTERNAL": str(source)})
    (build / "case-space.txt").write_text(D2_OLD_ERA.replace("nb=3", "nb=32") + "\n")
    o = kv.run(d2, kv.target(build, sanitizer=kv.sanitizer())).outcome
    assert o.verdict is Verdict.INCONCLUSIVE, o.reason
    placed = o.extra["site"]["registry"][0]
    assert placed["file"] == "ggml/src/ggml-cuda/fattn-mma-f16.cuh" and placed["line"], placed


def test_drift_selects_the_cases_run_selects(kv, old_era, monkeypatch):
    import kvdiag.engine.drift.session as session

    monkeypatch.setattr(session, "fingerprint_gpu", lambda **kw: fake_gpu())
    build, _ = old_era
    drift = session.run_drift_session(None, build, op="FLASH_ATTN_EXT", params="hsk=256,.*type_K=f16,type_V=f16",
                                      runs=2)
    assert drift.data["drift"]["params"] == "hsk=256,.*type_KV=f16"
    assert (build / "invocations.log").read_text().splitlines() == ["hsk=256,.*type_KV=f16"] * 2


@pytest.mark.parametrize("era, flags, printed", [
    (JOINED, [], "hsk=256,type_KV=f16"),
    (SPLIT, ["-DSPLIT"], "hsk=256,type_K=f16,type_V=f16"),
])
def test_a_compiled_program_carries_its_era_in_its_strings(tmp_path, era, flags, printed):
    """Not a stand-in script: the vars() idiom of test-backend-ops.cpp compiled with -O2, read back from
    the executable's bytes."""
    import shutil
    import subprocess

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    program = tmp_path / "vars"
    subprocess.run([compiler, "-O2", *flags, "-o", str(program), str(SCENARIO_BUILDS.parent / "vars_to_str.cpp")],
                   check=True)
    assert subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout == \
        f"  FLASH_ATTN_EXT({printed}): OK\n"
    assert program_kv_types(program) == era


def test_a_radius_measured_on_an_older_era_writes_regexes_every_era_can_read():
    from kvdiag.engine.scan.radius import case_regexes
    from kvdiag.engine.scan.kernels import DEFAULT_DIMENSIONS

    cases = [D2_OLD_ERA, D2_OLD_ERA.replace("type_KV=f16", "type_KV=q8_0")]
    regexes = case_regexes(cases, DEFAULT_DIMENSIONS)       # type_K, type_V: one type_KV on this build
    assert all("type_KV=" in r for r in regexes) and all(any(re.search(r, c) for r in regexes) for c in cases)
    newer = [c for c, _ in [(n, o) for n, o in ((n, in_the_older_form(n)) for n in recorded_cases())
                            if o in cases]]
    assert newer and all(any(re.search(adapt_regex(r, SPLIT), c) for r in regexes) for c in newer)
