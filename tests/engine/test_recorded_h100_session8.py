"""What the eighth device session recorded on an H100 (tests/fixtures/device/h100-session8), read back.

Upstream llama.cpp 749f688fc built there; `benchmarks/bench_scan.py --params hsk` with the old path
(`8@0:plain`) and three routed variants in one run, with kvdiag reading its children's output through
the chunked pump (`kvdiag.proc.pump`); then the same tree rebuilt with
probes/D2-without-mma-kernels.patch as it is now, and `kvdiag run D2` on it. Nothing here is timed:
the recorded rows are checked for what they say, and the recorded verdict is judged again by
kvdiag's own code.
"""

from __future__ import annotations

import json

import pytest

from engine_helpers import FIXTURES
from recorded_session import RecordedSession, affected
from kvdiag.engine.evidence.launch_proof import LaunchContext, judge_launch
from kvdiag.records.verdict import Verdict
from kvdiag.exitcodes import ExitCode
from kvdiag.parse.launches import Launch
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.kernel_symbols import KernelSymbols

SESSION = FIXTURES / "device" / "h100-session8"
UPSTREAM = "749f688fcaa4c472ec034b08cb8a907c45cfaa02"
ROUTED = ("8at0_auto+entry+bykernel", "8at0_auto+entry+bykernel+routej16", "8at0-b128_auto+entry+bykernel+routej16")


_RECORDED = RecordedSession(SESSION)
_text, _json = _RECORDED.text, _RECORDED.json
_affected = affected


def _rows() -> dict[str, dict]:
    return {r["variant"]: r for r in map(json.loads, _text("bench.log").splitlines()) if "wall_s" in r}


@pytest.mark.parametrize("variant", ROUTED)
def test_every_routed_variant_finds_the_old_paths_affected_set_on_another_gpu(variant):
    """A machine the scan was not tuned on (an H100, 16 cores): the same 1330 of 2932 cases as the old
    path in the same run, as on the H200; the 901 spared cases are the only verdicts that differ."""
    plain, routed = _json("bench-8at0_plain.json.gz"), _json(f"bench-{variant}.json.gz")
    assert len(plain["cases"]) == len(routed["cases"]) == 2932
    assert _affected(routed) == _affected(plain) and len(_affected(plain)) == 1330
    changed = {p for p in plain["cases"] if plain["cases"][p]["verdict"] != routed["cases"][p]["verdict"]}
    assert len(changed) == 901
    assert routed["phases"]["launch_changed"] == 0
    assert {c["device"]["name"] for c in routed["cases"].values() if c.get("device")} == {"NVIDIA H100 80GB HBM3"}


def test_the_rows_say_the_goal_is_not_reached_on_this_gpu_and_the_harness_is_no_longer_a_core():
    """The best routed wall is 82.5 s against the old path's 148.4 s in the same run (1.80x), not 60 s.
    kvdiag's own CPU is now under half of each wall (it was 0.8 to 1.1 of it on the H200 in session 7,
    when sh read each output line in Python)."""
    rows = _rows()
    assert set(rows) == {"8@0:plain", "8@0:auto+entry+bykernel", "8@0:auto+entry+bykernel+routej16",
                         "8@0/128:auto+entry+bykernel+routej16"}
    best = min(rows.values(), key=lambda r: r["wall_s"])
    assert best["variant"] == "8@0/128:auto+entry+bykernel+routej16" and best["processes"] == 32
    assert 60 < best["wall_s"] < rows["8@0:plain"]["wall_s"] and best["speedup"] == 1.8
    assert all(r["harness_cpu_s"] < 0.45 * r["wall_s"] for r in rows.values())
    assert all(r.get("affected_identical_to_baseline", True) for r in rows.values())


def test_the_build_without_d2s_kernels_is_not_applicable_quoting_cuobjdump():
    """The probe as it is now, built on the device: cuobjdump lists no flash_attn_ext_f16 kernel, the
    case launched the tile kernel, and `kvdiag run D2` said not-applicable (exit 2), quoting the listing."""
    assert _text("na-symbols-count.txt").strip() == "0"
    assert "fattn.cu.o" in _text("na-build.log.gz")
    verdict = _json("na-D2-verdict.json")
    assert verdict["verdict"] == "not-applicable"
    assert "na-run-D2 rc=%d" % ExitCode.NOT_APPLICABLE in _text("times.txt")
    evidence = verdict["attempts"][0]["evidence"]
    assert evidence["cases_executed"] == 1 and evidence["launch_listing"] == "launch probe"
    assert "5874 kernel symbol(s) in libggml-cuda.so.0.20.2 (cuobjdump -symbols | c++filt)" in evidence["launch_proof"]
    # Judged again with kvdiag's code: the recorded launches against a listing of the same size that
    # holds no kernel of D2's family.
    launches = [Launch(printed=k, kernel=k, line_no=i) for i, k in enumerate(evidence["launched"], start=1)]
    listing = KernelSymbols("libggml-cuda.so.0.20.2", "cuobjdump -symbols | c++filt",
                            tuple(evidence["launched"]) + tuple(f"other_kernel_{i}" for i in range(5872)))
    judged = judge_launch(load_registry(None).get("D2"), launches, True,
                          LaunchContext(symbols=lambda: listing, commit=UPSTREAM), tool="synccheck")
    assert judged.verdict is Verdict.NOT_APPLICABLE
    assert judged.text == evidence["launch_proof"]


def test_the_gpu_tests_passed_there_with_the_pump():
    assert "12 passed, 2 skipped" in _text("gpu-tests.log")
