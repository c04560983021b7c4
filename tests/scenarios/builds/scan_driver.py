"""Runs kvdiag's scan on a scenario build in its own process, for the scan's Ctrl-C test.

usage: scan_driver.py BUILD SANITIZER REGISTRY_DIR ENTRY_ID RUN_DIR OUT_JSON WORKERS [overlap]

With `overlap` the scan is routed, its phases overlapped (engine.scan.overlap), the build's own
test-backend-ops playing the launch probe's program, two cases per route process and one per
sanitized process.

The target gets a fake H200 instead of the machine's GPU (as the in-process engine
tests do). The case space is the entry's [scan] op and params, enumerated by the
build's `test-backend-ops support`. Prints `driver ready` before the scan and one
JSON line per finished case (`{"case": ..., "verdict": ...}`), then writes
`result.to_dict()` to OUT_JSON and exits 130 when the scan was interrupted, else 0.
"""
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from kvdiag.engine.verdict.judge import Gate
from kvdiag.engine.scan.cases import enumerate_cases, scan
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunDir
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint

# A shell may start us with SIGINT ignored (background jobs): take it back.
signal.signal(signal.SIGINT, signal.default_int_handler)
build, sanitizer, registry_dir, entry_id, run_path, out_json, workers = sys.argv[1:8]
run_dir = RunDir(Path(run_path))
entry = load_registry(Path(registry_dir)).get(entry_id)
target = prepare_target(Path(build), log_dir=run_dir.path / "target-logs", sanitizer=Path(sanitizer))
device = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability=(9, 0), sm_count=132,
                   total_memory_bytes=143 << 30, pci_bus_id=None)
gpu = GpuFingerprint(source="test", devices=(device,), driver_version=None, driver_cuda_version=None,
                     runtime_version=None, visible_devices=None, notes=())
target = dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=gpu))
space = enumerate_cases(target, entry.scan.op, entry.scan.params, run_dir)
print("driver ready", flush=True)


def on_case(params, attempt):
    print(json.dumps({"case": params, "verdict": attempt.verdict.value}), flush=True)


if sys.argv[8:] == ["overlap"]:
    import kvdiag.engine.scan.overlap as scan_overlap
    from kvdiag.controls.gate import no_sanitizer_gate
    from kvdiag.engine.scan.phases import run_phases
    from kvdiag.probes.program_rebuild import ProbeProgram

    scan_overlap.OVERLAP_ROUTE_BATCH = 2
    program = ProbeProgram("test-backend-ops-launch", Path(build) / "bin" / "test-backend-ops")
    result = run_phases(entry, dataclasses.replace(target, probe_program=lambda: program), run_dir, space=space,
                        workers=int(workers), devices=(), batch=1, limit=None, not_routed=None, kernel_filter=None,
                        instrument_note="", on_case=on_case, overlap=True,
                        gate_provider=lambda tool: no_sanitizer_gate(tool) if tool is None else Gate(True, "test gate"))
else:
    result = scan(entry, target, run_dir, space=space, workers=int(workers),
                  gate_provider=lambda tool: Gate(True, "test gate"), on_case=on_case)
tmp = Path(out_json + ".tmp")
tmp.write_text(json.dumps(result.to_dict(), indent=2))
os.replace(tmp, out_json)
sys.exit(130 if result.interrupted else 0)
