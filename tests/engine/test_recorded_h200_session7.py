"""What the seventh device session recorded on an H200 (tests/fixtures/device/h200-session7), read back.

Upstream llama.cpp 749f688fc built there, then `benchmarks/bench_scan.py --params hsk` with the old
path (`8@0:plain`) and three routed variants in one run; the BeeLlama fork 775450a68 built there and
scanned whole (`kvdiag scan D2 --params hsk --instrument entry --batch-order by-kernel`), its radius
written into registry/D2.md; and `kvdiag run D2` on the upstream build rebuilt with the first version
of probes/D2-without-mma-kernels.patch. Each recorded result is read again by kvdiag's own code, so
a change that would read these runs differently fails here.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from engine_helpers import FIXTURES
from recorded_session import RecordedSession, affected
from kvdiag.engine.evidence.launch_proof import LaunchContext, judge_launch
from kvdiag.engine.scan.radius import measure_radius
from kvdiag.records.verdict import Verdict
from kvdiag.parse.launches import parse_launches
from kvdiag.parse.symbols import demangled_kernels
from kvdiag.registry.loader import load_registry
from kvdiag.registry.radius import tables_for
from kvdiag.workspace.kernel_symbols import KernelSymbols

SESSION = FIXTURES / "device" / "h200-session7"
UPSTREAM = "749f688fcaa4c472ec034b08cb8a907c45cfaa02"
FORK = "775450a688437e8e9d32bb77ae466f7acb5d3577"
ROUTED = ("8at0_auto", "8at0_auto+entry+bykernel", "12at0_auto+entry+bykernel")


_RECORDED = RecordedSession(SESSION)
_text, _json = _RECORDED.text, _RECORDED.json
_affected = affected


@pytest.fixture(scope="module")
def plain() -> dict:
    return _json("bench-8at0_plain.json.gz")


@pytest.mark.parametrize("variant", ROUTED)
def test_a_routed_scan_finds_the_old_paths_affected_set_case_by_case(plain, variant):
    """The old path (the build's own program, every case sanitized) and each routed variant, one run:
    the same 1330 affected cases of 2932; the only verdicts that differ are the 901 cases that launched
    none of D2's kernels, not-applicable from their launch lines and never sanitized."""
    routed = _json(f"bench-{variant}.json.gz")
    assert len(plain["cases"]) == len(routed["cases"]) == 2932
    assert _affected(routed) == _affected(plain) and len(_affected(plain)) == 1330
    changed = {p for p in plain["cases"] if plain["cases"][p]["verdict"] != routed["cases"][p]["verdict"]}
    assert len(changed) == 901
    assert {(plain["cases"][p]["verdict"], routed["cases"][p]["verdict"]) for p in changed} == {
        ("not-reproduced", "not-applicable")}
    assert all("routed, not sanitized" in routed["cases"][p]["reason"] for p in changed)
    route, detect = routed["phases"]["route"], routed["phases"]["detect"]
    assert (route["reached"], route["not_reached"], detect["cases"]) == (2031, 901, 2031)
    assert routed["phases"]["launch_changed"] == 0


def test_the_benchmark_rows_say_where_the_time_went():
    """Not a timed test: the recorded rows, with the harness' own CPU beside each wall (for the routed rows,
    their detect phase's: the route phase's CPU was not counted then). The routed scan is
    about 80 s, not the 60 s asked; its route phase alone is 23 s."""
    rows = {r["variant"]: r for r in map(json.loads, _text("bench.log").splitlines()) if "wall_s" in r}
    assert set(rows) == {"8@0:plain", "8@0:auto", "8@0:auto+entry+bykernel", "12@0:auto+entry+bykernel"}
    assert rows["8@0:plain"]["path"] == "direct" and rows["8@0:auto"]["path"] == "routed"
    best = min(rows.values(), key=lambda r: r["wall_s"])
    assert best["variant"] == "8@0:auto+entry+bykernel" and 60 < best["wall_s"] < rows["8@0:plain"]["wall_s"]
    assert all(r["harness_cpu_s"] > 0.5 * r["wall_s"] for r in rows.values())
    assert all(r.get("affected_identical_to_baseline", True) for r in rows.values())


def test_the_forks_radius_in_the_registry_is_the_recorded_whole_op_scan():
    """registry/D2.md's table for 775450a68 is what `kvdiag registry radius` makes of the recorded scan."""
    scan = _json("fork-scan-D2-hsk.json.gz")
    assert scan["counts"]["confirmed"] == 2160 and len(scan["cases"]) == 4298
    made = measure_radius(scan, repo="https://github.com/GenerelSchwerz/llama.cpp", measured=dt.date(2026, 12, 2))
    (recorded,) = tables_for(load_registry(None).get("D2").radius, FORK, strict=True)
    for key in ("commit", "scanned", "cases", "affected_cases", "kernels", "instantiations", "clean_kernels",
                "params"):
        assert made[key] == recorded[key], key
    assert len(recorded["kernels"]) == 38
    assert {int(k.split("<")[1].split(",")[0]) for k in recorded["kernels"]} == {
        64, 80, 96, 128, 192, 256, 320, 512, 576}


def _without_mma_run() -> tuple[list, KernelSymbols]:
    launches = parse_launches(_text("na-run-D2-fast-1.stdout.log"))
    listing = KernelSymbols("libggml-cuda.so", "cuobjdump -symbols | c++filt",
                            demangled_kernels(_text("na-cuobjdump-fattn.cxxfilt.txt")))
    return launches, listing


def test_a_build_that_still_compiles_radius_kernels_but_never_launches_them_is_inconclusive():
    """The first version of the without-MMA probe left fattn.cu instantiating 16 flash_attn_ext_f16
    kernels (192/128 and 576/512), four of them in D2's upstream radius. D2's case launched the tile
    kernel: compiled but not launched is inconclusive, never not-reproduced, as the H200 said."""
    launches, listing = _without_mma_run()
    assert [x.kernel for x in launches] == ["flash_attn_tile<256, 256, 4, 4, false>",
                                            "flash_attn_combine_results<256>"]
    d2 = load_registry(None).get("D2")
    judged = judge_launch(d2, launches, True, LaunchContext(symbols=lambda: listing, commit=UPSTREAM),
                          tool="synccheck")
    assert judged.verdict is Verdict.INCONCLUSIVE
    compiled = judged.text.split("4 compiled (", 1)[1]
    assert all(k in compiled for k in ("flash_attn_ext_f16<192, 128, 1, 16, false, false>",
                                       "flash_attn_ext_f16<192, 128, 1, 8, false, false>",
                                       "flash_attn_ext_f16<192, 128, 4, 8, false, false>",
                                       "flash_attn_ext_f16<576, 512, 2, 4, false, true>"))
    recorded = _json("na-D2-verdict.json")
    assert recorded["verdict"] == "inconclusive"
    assert "launched: flash_attn_tile<256, 256, 4, 4, false>, flash_attn_combine_results<256>; 4 compiled" in \
        recorded["reason"]


def test_without_those_kernels_too_the_same_run_is_not_applicable_quoting_the_listing():
    """The probe as it is now also drops fattn.cu's MMA dispatch, so nothing instantiates the kernel: the
    same run against the listing without its flash_attn_ext_f16 symbols is not-applicable. (That build
    was not made on the device: what it lists is this session's listing less those 16 symbols.)"""
    launches, listing = _without_mma_run()
    none = KernelSymbols(listing.library, listing.tool, ("flash_attn_tile<256, 256, 4, 4, false>",
                                                         "flash_attn_combine_results<256>"))
    d2 = load_registry(None).get("D2")
    judged = judge_launch(d2, launches, True, LaunchContext(symbols=lambda: none, commit=UPSTREAM), tool="synccheck")
    assert judged.verdict is Verdict.NOT_APPLICABLE
    assert judged.text.startswith("this build contains no kernel the entry is about (the radius' kernels (")
    assert "2 kernel symbol(s) in libggml-cuda.so (cuobjdump -symbols | c++filt)" in judged.text


def test_the_kernels_left_on_the_device_are_exactly_fattn_cus_own_and_the_probe_drops_them():
    """The device build of the probe's first version dropped the MMA instance files and kept 16
    flash_attn_ext_f16 kernels; fattn.cu compiled alone on the CPU host (unmodified) instantiates
    exactly those 16, and with the probe as it is now, none: the build the probe makes holds no
    kernel of D2's family (the not-applicable above)."""
    from kvdiag.parse.launches import canonical

    lines = _text("cpu-fattn-nm-before-after-probe.txt").splitlines()
    on_cpu = {canonical(line[2:]) for line in lines if line.startswith("t ")}
    on_device = set(demangled_kernels(_text("na-cuobjdump-fattn.cxxfilt.txt")))
    assert len(on_cpu) == 16 and on_cpu == on_device
    assert lines[-1].endswith("as it is now: 0 flash_attn_ext_f16 symbols")
