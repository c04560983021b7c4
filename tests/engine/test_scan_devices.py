"""`kvdiag scan` on a host with several GPUs: cases spread over devices, pinned, attributed.

The staged case space (tests/scenarios/builds/backend_ops_case_space.py) without its
hanging case, scanned on a fake two-GPU target: each case's processes see only their
GPU (CUDA_VISIBLE_DEVICES by UUID, read back from the runner's cmd.json), every result
names its device, both devices take cases, and the verdicts are those of a one-GPU scan.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

from engine_helpers import ALLOWED
from test_scan import HANG, OP, scan_entry_body

from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.cases import CaseSpace, enumerate_cases, scan
from kvdiag.store.runs import RunDir
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint


def two_gpus(target):
    devices = tuple(GpuDevice(index=i, name="NVIDIA H200", uuid=f"GPU-{i}", compute_capability=(9, 0),
                              sm_count=132, total_memory_bytes=143 << 30, pci_bus_id=None) for i in range(2))
    gpu = GpuFingerprint(source="test", devices=devices, driver_version="580.159.04", driver_cuda_version="13.0",
                         runtime_version="13.0", visible_devices=None, notes=())
    return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=gpu))


def gate(tool):
    return no_sanitizer_gate(tool) if tool is None else ALLOWED


def test_cases_are_spread_over_two_gpus_pinned_and_attributed(kv):
    entry = kv.entry("D921", scan_entry_body(30))
    target = two_gpus(kv.target(kv.build("backend_ops_case_space"), sanitizer=kv.sanitizer()))
    full = enumerate_cases(target, OP, "hsk=256", RunDir(kv.root / "enumerate"))
    space = CaseSpace(OP, "hsk=256", tuple(p for p in full.supported if p != HANG), full.not_supported)
    devices = target.gpu.devices

    single = scan(entry, target, RunDir(kv.root / "one"), space=space, workers=2, gate_provider=gate)
    spread_dir = RunDir(kv.root / "two")
    spread = scan(entry, target, spread_dir, space=space, workers=2, gate_provider=gate, devices=devices)

    assert spread.workers == 4  # -j is per GPU
    assert {p: a.verdict for p, a in spread.results.items()} == {p: a.verdict for p, a in single.results.items()}
    used = Counter(a.device["uuid"] for a in spread.results.values())
    assert set(used) == {"GPU-0", "GPU-1"} and abs(used["GPU-0"] - used["GPU-1"]) <= 2
    assert all(a.device is None for a in single.results.values())
    for cmd in spread_dir.logs.glob("case*.cmd.json"):
        env = json.loads(cmd.read_text())["env_overrides"]
        assert env["CUDA_VISIBLE_DEVICES"] in {"GPU-0", "GPU-1"}
    per_device = spread.to_dict()["devices"]
    assert sum(row["cases"] for row in per_device.values()) == len(space.supported)
    assert sum(row["affected"] for row in per_device.values()) == len(spread.affected)


def test_one_chosen_gpu_is_pinned_too(kv):
    """`--devices 1` on a two-GPU host means GPU 1: every case is pinned to it and names it."""
    entry = kv.entry("D922", scan_entry_body(30))
    target = two_gpus(kv.target(kv.build("backend_ops_case_space"), sanitizer=kv.sanitizer()))
    full = enumerate_cases(target, OP, "hsk=256", RunDir(kv.root / "enumerate"))
    space = CaseSpace(OP, "hsk=256", tuple(p for p in full.supported if p != HANG)[:4], full.not_supported)
    run_dir = RunDir(kv.root / "gpu1")
    result = scan(entry, target, run_dir, space=space, workers=2, gate_provider=gate, devices=[target.gpu.devices[1]])
    assert result.workers == 2 and len(result.results) == 4
    assert {a.device["uuid"] for a in result.results.values()} == {"GPU-1"}
    envs = {json.loads(c.read_text())["env_overrides"]["CUDA_VISIBLE_DEVICES"] for c in run_dir.logs.glob("case*.cmd.json")}
    assert envs == {"GPU-1"}
