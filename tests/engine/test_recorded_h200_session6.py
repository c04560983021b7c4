"""What the sixth device session recorded on an H200 (tests/fixtures/device/h200-session6), read back.

The BeeLlama fork 775450a68 built there (ccache), the seed's 27B shape synthesized there
(`kvdiag model synth --preset seed-27b`), then: D3's seed arm at that scale (10 fresh servers,
0/10), `kvdiag verify D3 --probe D2-fix-uniform-barrier --before latest` (the AFTER arm on a
scratch build with the D2 fix, 0/3), D5's two arms at that scale (57.2×), D1 and D2 on the fork.
Each server log is judged again here by the registry's own entry, so a change to D3's `expect`
or D5's relative signature that would read these runs differently fails a test.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from engine_helpers import FIXTURES, Printed, judge_d5_servers
from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.evidence.observe import observe
from kvdiag.records.verdict import Verdict
from kvdiag.records.rates import wilson_interval
from kvdiag.registry.loader import load_registry

SESSION = FIXTURES / "device" / "h200-session6"
NO_SANITIZER = Gate(True, "no sanitizer involved")


def _text(name: str) -> str:
    path = SESSION / name
    return gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()


def _json(name: str) -> dict:
    return json.loads(_text(name))


def test_the_seed_scale_model_was_written_in_two_minutes_with_a_small_peak():
    said = _text("synth.log")
    assert "(27698.2 MiB, 27,320,692,736 parameters, q8_0) in 115.6 s" in said
    assert "n_layer=64 n_embd=5120 n_ff=17408" in said and "mtp_layers=1 (block_count 65)" in said
    assert "peak_rss_mib=230.8" in said
    assert re.search(r"\b29043706112\b", said)


@pytest.mark.parametrize("index", range(1, 11))
def test_each_seed_arm_server_ran_the_path_and_did_not_abort(index):
    """Every one of the ten 27B servers: host KV (16 attention layers, 8704 MiB), drafts accepted,
    900 tokens, no illegal access; judged by the registry's D3 as it stands."""
    d3 = load_registry(None).get("D3")
    log = _text(f"fork-D3-seed-27b-server-mtp-{index}.combined.log.gz")
    attempt = judge_attempt(d3, observe(d3.default_step, [Printed(log)], []), NO_SANITIZER, index, 0.0)
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert "CPU KV buffer size =  8704.00 MiB" in attempt.reason
    assert "draft acceptance = 0.99704 (  673 accepted /   675 generated)" in attempt.reason
    assert "illegal memory access" not in log


def test_the_seed_arm_is_zero_of_ten_and_rules_out_a_rate_above_28_percent():
    record = _json("fork-run-D3-seed-27b.run.json.gz")["outcome"]
    assert (record["verdict"], record["k"], record["n"]) == ("not-reproduced", 0, 10)
    low, high = wilson_interval(0, 10)
    assert (round(low, 4), round(high, 4)) == (0.0, 0.2775)
    said = _text("fork-run-D3-seed-27b.log")
    assert "runs: 0/10 runs (95% Wilson interval 0%–28%): the runs rule out a rate above 28%" in said
    assert "-m <models>/seed-27b.gguf -ngl 99 -fa on --spec-type draft-mtp -nkvo -ctk q8_0 -ctv q8_0" in said


def test_verify_reused_the_seed_arm_and_found_nothing_to_fix():
    """The open question of #27 at this rung: D3 does not show before the D2 fix, so the fix cannot
    be judged; both rates are recorded with their intervals and Fisher's test."""
    verify = _json("fork-verify-D3-seed-27b.json.gz")
    seed_run = "20261202-124217.408291-0002-D3"            # the run folder of fork-run-D3-seed-27b.log
    assert f"run: $KVDIAG_HOME/runs/{seed_run} (370.9 s)" in _text("fork-run-D3-seed-27b.log")
    assert verify["before"]["reused"]["run_id"] == seed_run and verify["before"]["reused"]["runs"] == 10
    assert verify["rates"]["before"] == {"k": 0, "n": 10, "low": 0.0, "high": 0.2775, "method": "wilson-95"}
    assert verify["rates"]["after"] == {"k": 0, "n": 3, "low": 0.0, "high": 0.5615, "method": "wilson-95"}
    assert (verify["rates"]["p_value"], verify["rates"]["differ"]) == (1.0, False)
    assert verify["conclusion"] == "not verified: the defect does not reproduce before the fix"
    assert verify["exit_code"] == 4 and verify["source_status_unchanged"] is True
    assert verify["after"]["build_s"] == pytest.approx(107.5, abs=0.1)
    d3 = load_registry(None).get("D3")
    for index in (1, 2, 3):
        log = _text(f"fork-D3-after-D2-fix-server-mtp-{index}.combined.log.gz")
        attempt = judge_attempt(d3, observe(d3.default_step, [Printed(log)], []), NO_SANITIZER, index, 0.0)
        assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason


def test_the_scratch_build_with_the_fix_hit_the_users_ccache():
    assert "Hits:               0 /   493" in _text("ccache-after-fork.txt")
    assert "Hits:             468 /   986" in _text("ccache-after-verify.txt")
    assert "build fork test-backend-ops llama-server rc=0 533.5 s" in _text("build-times.txt")


@pytest.mark.parametrize("session, kvarn5, q8_0, figures, ratio", [
    ("h200-session5", "call3-D5-kvarn5-1.combined.log.gz", "call3-D5-q8_0-control-1.combined.log.gz",
     ("kvarn5: 956.40 MiB", "q8_0-control: 9.79 MiB"), "97.7×"),           # the 12.8 MiB model
    ("h200-session6", "fork-D5-seed-27b-kvarn5-1.combined.log.gz", "fork-D5-seed-27b-q8_0-control-1.combined.log.gz",
     ("kvarn5: 2195.90 MiB", "q8_0-control: 38.40 MiB"), "57.2×"),         # the seed's 27B shape
])
def test_d5s_two_recorded_servers_confirm_by_their_ratio_at_both_scales(session, kvarn5, q8_0, figures, ratio):
    folder = FIXTURES / "device" / session
    attempt = judge_d5_servers(gzip.decompress((folder / kvarn5).read_bytes()).decode(),
                               gzip.decompress((folder / q8_0).read_bytes()).decode())
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert all(figure in attempt.reason for figure in figures)
    assert f"{ratio} (at least the 50× that confirms)" in attempt.reason


def test_the_fork_names_what_launched_or_why_nothing_did():
    d2 = _text("fork-run-D2.log")
    assert "D2 CONFIRMED" in d2 and "site: fattn-mma-f16.cuh:1607" in d2
    assert "launched (1 kernel instantiation(s), launch probe):\n    flash_attn_ext_f16<256, 256, 4, 4, false, false, " \
           "(ggml_type)1, (ggml_type)1>" in d2
    d1 = _text("fork-run-D1.log")
    assert "D1 CONFIRMED" in d1 and "../src/ggml/src/ggml-cuda/fattn.cu:380: fatal error" in d1
    assert "launched (0 kernel instantiation(s), launch probe):" in d1   # the launcher aborts before any launch


def test_the_routed_scan_that_could_not_start_its_route_processes():
    """The first routed scan of the fork: its 512-case route regex was 194,266 bytes, over Linux's
    131,072-byte limit for one argument, so no route process started (kept as the regression's record)."""
    cmd = _json("fork-scan-route001.cmd.json")
    assert "Argument list too long" in cmd["result"]["error"]
    assert cmd["argv"][-1].endswith("(194266 bytes in all)")
    said = _text("fork-scan-D2-hsk-route-e2big.log.gz")
    assert "route 4298 case(s) in 9 process(es), 0.5 s: 0 reach D2's kernels" in said and "4298 unrouted" in said


def test_the_report_states_the_verification_and_the_reused_seed_arm():
    report = _text("fork-report-D3.md")
    assert "## Fix verification" in report
    assert ("**not verified: the defect does not reproduce before the fix**: `kvdiag verify D3 --probe "
            "D2-fix-uniform-barrier` on `775450a68843`") in report
    assert "the recorded run `20261202-124217.408291-0002-D3` (2026-12-02 12:42 UTC), reused, not run again" in report
    assert "0/3 runs (95% Wilson interval 0%–56%)" in report and "p = 1, no difference shown" in report
