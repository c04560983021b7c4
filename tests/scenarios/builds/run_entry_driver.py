"""Runs kvdiag's run_entry on a scenario build in its own process, for the Ctrl-C test.

usage: run_entry_driver.py BUILD SANITIZER REGISTRY_DIR ENTRY_ID RUN_DIR

The target gets a fake H200 instead of the machine's GPU (as the in-process engine
tests do). Prints the outcome as one JSON line; exits 130 on RunInterrupted,
0 when the run ended by itself.
"""
import dataclasses
import json
import signal
import sys
from pathlib import Path

from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.errors import RunInterrupted
from kvdiag.engine.verdict.judge import Gate
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunDir
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint

# A shell may start us with SIGINT ignored (background jobs): take it back.
signal.signal(signal.SIGINT, signal.default_int_handler)
build, sanitizer, registry_dir, entry_id, run_path = sys.argv[1:6]
run_dir = RunDir(Path(run_path))
entry = load_registry(Path(registry_dir)).get(entry_id)
target = prepare_target(Path(build), log_dir=run_dir.path / "target-logs", sanitizer=Path(sanitizer))
device = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability=(9, 0), sm_count=132,
                   total_memory_bytes=143 << 30, pci_bus_id=None)
gpu = GpuFingerprint(source="test", devices=(device,), driver_version=None, driver_cuda_version=None,
                     runtime_version=None, visible_devices=None, notes=())
target = dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=gpu))
print("driver ready", flush=True)
try:
    outcome = run_entry(entry, target, run_dir, options=RunOptions(),
                        gate_provider=lambda tool: Gate(True, "test gate"))
except RunInterrupted as exc:
    print(json.dumps(exc.outcome.to_dict()), flush=True)
    sys.exit(130)
print(json.dumps(outcome.to_dict()), flush=True)
sys.exit(0)
