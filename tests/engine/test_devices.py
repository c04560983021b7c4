"""Spreading GPU work over several devices: pinning values, selection, assignment, attribution."""

from __future__ import annotations

import pytest

from kvdiag.engine.verdict.devices import assign, describe, device_key, select_devices, visible_value
from kvdiag.errors import UsageError
from kvdiag.workspace.gpu import GpuDevice


def gpu(index: int, uuid: str | None = None) -> GpuDevice:
    return GpuDevice(index=index, name="NVIDIA H200", uuid=uuid, compute_capability=(9, 0), sm_count=132,
                     total_memory_bytes=143 << 30, pci_bus_id=f"0000:{index:02x}:00.0")


def test_a_uuid_pins_the_same_gpu_whatever_the_parent_sees():
    assert visible_value(gpu(1, "GPU-abc"), {"CUDA_VISIBLE_DEVICES": "5,7"}) == "GPU-abc"


def test_an_index_is_mapped_through_the_parents_list():
    assert visible_value(gpu(1), {"CUDA_VISIBLE_DEVICES": "5,7"}) == "7"
    assert visible_value(gpu(1), {}) == "1"


def test_select_devices_by_index_or_uuid_and_refuses_unknown_ones():
    devices = [gpu(0, "GPU-a"), gpu(1, "GPU-b")]
    assert select_devices(devices, None) == devices
    assert select_devices(devices, "1") == [devices[1]]
    assert select_devices(devices, "GPU-a,1,0") == devices
    with pytest.raises(UsageError, match="no visible GPU '2'"):
        select_devices(devices, "2")


def test_workers_are_spread_evenly_over_devices():
    devices = [gpu(0, "GPU-a"), gpu(1, "GPU-b")]
    assert [d.index for d in assign(5, devices)] == [0, 1, 0, 1, 0]
    assert assign(3, []) == [None, None, None]


def test_results_name_their_device():
    d = describe(gpu(1, "GPU-b"))
    assert d == {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-b", "cc": "9.0", "pci_bus_id": "0000:01:00.0"}
    assert device_key(gpu(1, "GPU-b")) == "GPU-b" and device_key(gpu(2)) == "gpu2"


def test_a_pinned_attempt_sees_only_its_gpu_and_names_it(kv, d2):
    """The scenario build prints nothing of the environment, so read it back from cmd.json."""
    import json

    from kvdiag.engine.verdict.attempt import attempt_step
    from kvdiag.engine.verdict.planning import RunOptions
    from kvdiag.engine.verdict.judge import Gate
    from kvdiag.store.runs import RunDir

    target = kv.target_for("backend_ops_all_ok")
    run_dir = RunDir(kv.root / "pinned")
    device = gpu(1, "GPU-second")
    attempt = attempt_step(d2, d2.default_step, target, run_dir, 1, "pinned", RunOptions(device=device),
                           lambda tool: Gate(True, "control passed"))
    assert attempt.device["uuid"] == "GPU-second"
    cmd = json.loads(next(run_dir.logs.glob("*.cmd.json")).read_text())
    assert cmd["env_overrides"]["CUDA_VISIBLE_DEVICES"] == "GPU-second"
