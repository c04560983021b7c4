"""Benchmark: what kvdiag's own CPU in a routed scan costs per sanitizer finding, on the CPU host.

On the H200 the routed whole-op scan of D2 spent 55–73 s of kvdiag's own CPU (`harness_cpu_s`, the
detect phase only then) in an 80–90 s wall (tests/fixtures/device/h200-session7). This replays the recorded whole-op
scan (tests/fixtures/device/h200-session5, every EVERY-th case) with the stand-in test-backend-ops
and compute-sanitizer of the tests, routed with 8 workers, in two arms in one run: each affected
case printing one barrier record, then FINDINGS records (the H200 printed up to 257 per case,
321,674 in all). The difference in kvdiag's CPU (time.process_time: every thread of this
process, no child) divided by the extra records is the harness' cost per record, and that cost
times the H200's record count is what the volume alone costs the harness there.

    BENCH_EVERY=4 BENCH_FINDINGS=64 python3 -m pytest -q -s benchmarks/bench_harness_volume.py

Run explicitly (pytest collects tests/ only). Results are printed as one JSON line per arm and a
summary line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "engine")]

from engine_helpers import ALLOWED, REGISTRY, read_recorded  # noqa: E402
from kvdiag.controls.gate import no_sanitizer_gate  # noqa: E402
from kvdiag.engine.scan.cases import enumerate_cases  # noqa: E402
from kvdiag.engine.scan.phases import run_phases  # noqa: E402
from kvdiag.probes.program_rebuild import ProbeProgram  # noqa: E402
from kvdiag.registry.loader import load_registry  # noqa: E402
from kvdiag.store.runs import RunDir  # noqa: E402
from test_scan import scan_scenarios  # noqa: E402
from test_scan_route_recorded import RECORDED, launches_of  # noqa: E402

H200_FINDINGS = 321674     # the session-5 whole-op scan's error counts, summed over its 1330 affected cases


def _arm(tmp_path_factory, d2, chosen: dict, per_case: int, name: str) -> dict:
    with scan_scenarios(tmp_path_factory, f"harness-{name}", "D930") as (root, kv, _):
        build = kv.build("backend_ops_replays_h200_scan")
        (build / "replay.json").write_text(json.dumps({
            p: {"launches": launches_of(c),
                "findings": (c["instantiations"][:1] * per_case) if c["verdict"] == "confirmed" else []}
            for p, c in chosen.items()}))
        target = kv.target(build, sanitizer=kv.sanitizer())
        target = dataclasses.replace(target, probe_program=lambda: ProbeProgram(
            "test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        space = enumerate_cases(target, "FLASH_ATTN_EXT", "hsk", RunDir(root / "enumerate"))
        wall, cpu = time.monotonic(), time.process_time()
        result = run_phases(d2, target, RunDir(root / "scan"), space=space, workers=8, devices=(), batch=0,
                            limit=None, kernel_filter=None, instrument_note="", not_routed=None,
                            gate_provider=lambda tool: no_sanitizer_gate(tool) if tool is None else ALLOWED)
        row = {"arm": name, "cases": len(chosen), "records_per_affected_case": per_case,
               "affected": len(result.affected), "wall_s": round(time.monotonic() - wall, 2),
               "harness_cpu_s": round(time.process_time() - cpu, 2)}
        print(json.dumps(row), flush=True)
        return row


def test_harness_cpu_per_record(tmp_path_factory):
    every, findings = int(os.environ.get("BENCH_EVERY", "4")), int(os.environ.get("BENCH_FINDINGS", "64"))
    recorded = json.loads(read_recorded(RECORDED))
    chosen = {p: recorded["cases"][p] for p in sorted(recorded["cases"])[::every]}
    d2 = load_registry(REGISTRY).get("D2")
    one = _arm(tmp_path_factory, d2, chosen, 1, "one-record")
    many = _arm(tmp_path_factory, d2, chosen, findings, f"{findings}-records")
    extra = (findings - 1) * many["affected"]
    per_record_ms = (many["harness_cpu_s"] - one["harness_cpu_s"]) / extra * 1000
    print(json.dumps({"extra_records": extra, "harness_ms_per_record": round(per_record_ms, 3),
                      "h200_records": H200_FINDINGS,
                      "h200_volume_harness_cpu_s": round(per_record_ms * H200_FINDINGS / 1000, 1)}), flush=True)
    assert one["affected"] == many["affected"] > 0
