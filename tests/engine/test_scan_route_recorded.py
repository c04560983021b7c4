"""A routed scan of D2 over cases of the H200's whole-op scan, replayed, against the same scan unrouted.

The H200 scanned all 2932 FLASH_ATTN_EXT cases of upstream 749f688fc unrouted (every case under
synccheck, the launch probe listing launches): 1330 affected, 701 not-reproduced, 901
not-applicable because they launched none of D2's kernels
(tests/fixtures/device/h200-session5/scan-D2-hsk-upstream-749f688fc.json.gz). A stand-in
test-backend-ops (tests/scenarios/builds/backend_ops_replays_h200_scan.py) replays every 60th
case of it as recorded: the kernels it launched (the not-applicable and not-reproduced cases'
reasons name them; an affected case launched the ``__global__`` kernel of its recorded
``flash_attn_ext_f16_process_tile`` instantiation) and, under the sanitizer, a barrier finding
per recorded instantiation. Scanned with the real D2 entry, unrouted and routed, every case
must come out as the H200 recorded it, both ways; the routed scan must not sanitize one of the
not-applicable cases.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine_helpers import ALLOWED, FIXTURES, read_recorded
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.cases import enumerate_cases
from kvdiag.engine.scan.phases import run_phases
from kvdiag.records.verdict import Verdict
from kvdiag.parse.launches import canonical, template_args
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.store.runs import RunDir
from test_scan import scan_scenarios

RECORDED = FIXTURES / "device" / "h200-session5" / "scan-D2-hsk-upstream-749f688fc.json.gz"
EVERY = 60


def split_kernels(names: str) -> list[str]:
    """``a<1, 2>, b<3>`` → ``["a<1, 2>", "b<3>"]``: commas inside template arguments stay."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(names):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(names[start:i].strip())
            start = i + 1
    out.append(names[start:].strip())
    return [n for n in out if n]


def launches_of(case: dict) -> list[str]:
    """What the recorded case launched: named in its reason, or for an affected case the kernel of
    each recorded tile instantiation (process_tile<D, DV, c1, c2, warps, softcap, mla, …> runs in
    flash_attn_ext_f16<D, DV, c1, c2, softcap, mla>)."""
    reason = case["reason"]
    if case["verdict"] == "not-applicable":
        return split_kernels(reason.rpartition("(launched: ")[2][:-1])
    if case["verdict"] == "not-reproduced":
        return split_kernels(reason.rpartition("launched under synccheck: ")[2])
    kernels = []
    for inst in case["instantiations"]:
        args = template_args(canonical(inst))
        kernels.append(f"flash_attn_ext_f16<{', '.join(args[:4] + args[5:7])}>")
    return list(dict.fromkeys(kernels))


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, d2_module):
    recorded = json.loads(read_recorded(RECORDED))
    chosen = {p: recorded["cases"][p] for p in sorted(recorded["cases"])[::EVERY]}
    with scan_scenarios(tmp_path_factory, "scan-route-recorded", "D927") as (root, kv, _):
        build = kv.build("backend_ops_replays_h200_scan")
        (build / "replay.json").write_text(json.dumps({
            p: {"launches": launches_of(c), "findings": c["instantiations"] if c["verdict"] == "confirmed" else []}
            for p, c in chosen.items()}))
        target = kv.target(build, sanitizer=kv.sanitizer())
        target = dataclasses.replace(target, probe_program=lambda: ProbeProgram(
            "test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        space = enumerate_cases(target, "FLASH_ATTN_EXT", "hsk", RunDir(root / "enumerate"))
        common = dict(space=space, workers=4, devices=(), batch=0, limit=None, kernel_filter=None,
                      instrument_note="", gate_provider=lambda tool: no_sanitizer_gate(tool) if tool is None else ALLOWED)
        direct = run_phases(d2_module, target, RunDir(root / "direct"), not_routed="--no-route", **common)
        before = len((build / "sanitized.log").read_text().splitlines())
        routed = run_phases(d2_module, target, RunDir(root / "routed"), not_routed=None, **common)
        sanitized = (build / "sanitized.log").read_text().splitlines()[before:]
        yield chosen, direct, routed, sanitized


@pytest.fixture(scope="module")
def d2_module():
    from engine_helpers import REGISTRY
    from kvdiag.registry.loader import load_registry

    return load_registry(REGISTRY).get("D2")


def test_every_replayed_case_comes_out_as_the_h200_recorded_it_routed_or_not(replayed):
    chosen, direct, routed, _ = replayed
    recorded = {p: c["verdict"] for p, c in chosen.items()}
    assert {p: a.verdict.value for p, a in direct.results.items()} == recorded
    assert {p: a.verdict.value for p, a in routed.results.items()} == recorded
    assert set(recorded.values()) == {"confirmed", "not-reproduced", "not-applicable"}


def test_the_unrouted_scan_gives_the_recorded_reasons_and_the_routed_one_says_it_did_not_sanitize(replayed):
    chosen, direct, routed, _ = replayed
    for params, case in chosen.items():
        if case["verdict"] == "not-applicable":
            assert direct.results[params].reason == case["reason"]
            routed_reason = routed.results[params].reason
            assert routed_reason.startswith("1 matching case(s) executed in launch mode without synccheck (1 OK); "
                                            "routed, not sanitized: this case launched no kernel the entry is about")
            assert routed_reason.endswith(case["reason"].rpartition("but ")[2])


def test_the_routed_scan_sanitizes_exactly_the_cases_that_reach_d2s_kernels(replayed):
    chosen, _, routed, sanitized = replayed
    reaching = {p for p, c in chosen.items() if c["verdict"] != "not-applicable"}
    assert set(sanitized) == reaching
    phases = routed.phases
    assert phases["route"]["reached"] == len(reaching) and phases["route"]["unrouted"] == {}
    assert phases["route"]["not_reached"] == len(chosen) - len(reaching)
    assert phases["launch_changes"] == []
    affected = {p for p, a in routed.affected}
    assert affected == {p for p, c in chosen.items() if c["verdict"] == "confirmed"}
    assert all(routed.results[p].verdict is Verdict.CONFIRMED for p in affected)
