"""Benchmark: a routed scan whose workers judge one unit while the next unit's process runs, against the
old dispatch (one unit in flight per worker: its slot idle while it judges), on the CPU host.

On an H100 (device session 32, `kvdiag scan D2 --params hsk`, tests/fixtures/device/h100-session32/) the
detect phase's nine first batches ended within three seconds of each other, each having printed 8 to 10 MB
of barrier records, and six of the second wave's batches started 7 to 10 s after their slots had come free:
the nine judgings shared one interpreter (kvdiag.proc.turns). This replays the recorded whole-op scan
(tests/fixtures/device/h200-session5, every EVERY-th case) with the stand-in test-backend-ops and
compute-sanitizer of the tests, routed, WORKERS workers, each affected case printing FINDINGS barrier
records, each sanitized case sleeping SANITIZED_S (its kernels' time on a GPU, where the host waits) and
each bare case BARE_S, under two dispatches in alternating arms in one run: UNITS_PER_WORKER 1 (the old
one) and 2 (kvdiag's). Per arm: the scan's wall, each phase's, and how long the detect phase's batches
stood between one batch's end and the next start of a batch (`detect_idle_slot_s`: summed over the wave,
the seconds a slot had no process while batches were still queued).

    BENCH_EVERY=2 BENCH_FINDINGS=128 BENCH_SANITIZED_S=0.05 BENCH_ROUNDS=2 \\
        python3 -m pytest -q -s benchmarks/bench_judging_turns.py

Run explicitly (pytest collects tests/ only). One JSON line per arm, then a summary line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "engine")]

from engine_helpers import ALLOWED, REGISTRY, read_recorded  # noqa: E402
from kvdiag.engine.scan import dispatch as dispatch_module  # noqa: E402
from kvdiag.engine.scan.cases import enumerate_cases  # noqa: E402
from kvdiag.engine.scan.phases import run_phases  # noqa: E402
from kvdiag.controls.gate import no_sanitizer_gate  # noqa: E402
from kvdiag.probes.program_rebuild import ProbeProgram  # noqa: E402
from kvdiag.registry.loader import load_registry  # noqa: E402
from kvdiag.store.runs import RunDir  # noqa: E402
from test_scan import scan_scenarios  # noqa: E402
from test_scan_route_recorded import RECORDED, launches_of  # noqa: E402


def idle_slot_s(logs: Path, workers: int) -> float:
    """Seconds the detect batches' slots stood empty while batches waited: with the batches sorted by start,
    the k-th batch after the first wave could have started when the k-th earliest running batch ended."""
    spans = []
    for cmd in logs.glob("batch*.cmd.json"):
        record = json.loads(cmd.read_text())
        start = datetime.fromisoformat(record["started_at"]).timestamp()
        spans.append((start, start + (record.get("result") or {}).get("duration_s", 0.0)))
    spans.sort()
    ends = sorted(end for _, end in spans[:workers])
    idle = 0.0
    for start, end in spans[workers:]:
        free = ends.pop(0)
        idle += max(0.0, start - free)
        ends = sorted(ends + [end])
    return round(idle, 2)


def _arm(tmp_path_factory, d2, chosen: dict, units_per_worker: int, workers: int, name: str) -> dict:
    dispatch_module.UNITS_PER_WORKER = units_per_worker
    with scan_scenarios(tmp_path_factory, f"turns-{name}", "D931") as (root, kv, _):
        build = kv.build("backend_ops_replays_h200_scan")
        (build / "replay.json").write_text(json.dumps(chosen))
        target = kv.target(build, sanitizer=kv.sanitizer())
        target = dataclasses.replace(target, probe_program=lambda: ProbeProgram(
            "test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        space = enumerate_cases(target, "FLASH_ATTN_EXT", "hsk", RunDir(root / "enumerate"))
        wall, cpu = time.monotonic(), time.process_time()
        result = run_phases(d2, target, RunDir(root / "scan"), space=space, workers=workers, devices=(), batch=0,
                            limit=None, kernel_filter=None, instrument_note="", not_routed=None,
                            gate_provider=lambda tool: no_sanitizer_gate(tool) if tool is None else ALLOWED)
        phases = result.phases or {}
        row = {"arm": name, "units_per_worker": units_per_worker, "cases": len(chosen),
               "affected": len(result.affected), "wall_s": round(time.monotonic() - wall, 2),
               "route_wall_s": (phases.get("route") or {}).get("wall_s"),
               "detect_wall_s": (phases.get("detect") or {}).get("wall_s"),
               "detect_batches": len(result.batches), "processes": result.processes,
               "detect_idle_slot_s": idle_slot_s(root / "scan" / "logs", workers),
               "harness_cpu_s": round(time.process_time() - cpu, 2),
               "verdicts": {p: a.verdict.value for p, a in result.results.items()}}
        print(json.dumps({k: v for k, v in row.items() if k != "verdicts"}), flush=True)
        return row


def test_judging_beside_the_next_process(tmp_path_factory):
    every = int(os.environ.get("BENCH_EVERY", "2"))
    findings = int(os.environ.get("BENCH_FINDINGS", "128"))
    sanitized_s = float(os.environ.get("BENCH_SANITIZED_S", "0.05"))
    bare_s = float(os.environ.get("BENCH_BARE_S", "0.0"))
    workers = int(os.environ.get("BENCH_WORKERS", "8"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "1"))
    recorded = json.loads(read_recorded(RECORDED))
    chosen = {p: {"launches": launches_of(c), "sanitized_s": sanitized_s, "bare_s": bare_s,
                  "findings": (c["instantiations"][:1] * findings) if c["verdict"] == "confirmed" else []}
              for p, c in sorted(recorded["cases"].items())[::every]}
    d2 = load_registry(REGISTRY).get("D2")
    kept = dispatch_module.UNITS_PER_WORKER
    rows = []
    try:
        for r in range(rounds):
            for units in ((1, 2) if r % 2 == 0 else (2, 1)):
                rows.append(_arm(tmp_path_factory, d2, chosen, units, workers, f"units-{units}-round-{r + 1}"))
    finally:
        dispatch_module.UNITS_PER_WORKER = kept
    old = [r for r in rows if r["units_per_worker"] == 1]
    new = [r for r in rows if r["units_per_worker"] == 2]
    print(json.dumps({
        "old_wall_s": [r["wall_s"] for r in old], "new_wall_s": [r["wall_s"] for r in new],
        "old_detect_idle_slot_s": [r["detect_idle_slot_s"] for r in old],
        "new_detect_idle_slot_s": [r["detect_idle_slot_s"] for r in new],
        "verdicts_identical": all(r["verdicts"] == rows[0]["verdicts"] for r in rows)}), flush=True)
    assert all(r["verdicts"] == rows[0]["verdicts"] for r in rows)
