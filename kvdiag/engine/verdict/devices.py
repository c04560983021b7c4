"""Spreading GPU work over the visible devices of one host.

Each device gets its own slot pool (keyed by its UUID) and each process is
pinned to one device through CUDA_VISIBLE_DEVICES, so that a result can always
name the device (and its fingerprint) that produced it. Pinning uses the UUID
when the fingerprint has one: it means the same GPU whatever the parent's own
CUDA_VISIBLE_DEVICES is; an index is mapped through the parent's list.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, ContextManager, Iterator, Mapping, Sequence

from kvdiag.errors import UsageError
from kvdiag.proc.slots import SlotPool, gpu_slots, scan_slots
from kvdiag.proc.turns import process_turn
from kvdiag.registry.entry import Entry


def visible_value(device: Any, environ: Mapping[str, str] | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a child exactly this device."""
    if getattr(device, "uuid", None):
        return str(device.uuid)
    environ = os.environ if environ is None else environ
    parent = [p.strip() for p in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if p.strip()]
    if parent and device.index < len(parent):
        return parent[device.index]
    return str(device.index)


def device_key(device: Any) -> str:
    return str(getattr(device, "uuid", None) or f"gpu{device.index}")


def gpu_lease(entry: Entry, target: Any, options: Any) -> ContextManager:
    """What a process of a run or a scan's unit starts under: in a scan, its unit's turn at running one
    (kvdiag.proc.turns: at most -j at once per device, whatever else its workers are doing); for GPU work,
    then a slot of the GPU's pool, as the run's options (engine.verdict.planning.RunOptions) ask on the
    target's GPU or the device they pin."""
    if not entry.requires.gpu:
        return process_turn()
    device = options.device or target.first_device
    known = device.total_memory_bytes if device else None
    key = target.device_key() if options.device is None else device_key(options.device)
    pool = SlotPool(key, scan_slots(known) if options.scan_case else gpu_slots(known or 16 << 30))
    return _in_turn(process_turn(), pool.acquire(options.slots, timeout=None))


@contextlib.contextmanager
def _in_turn(turn: ContextManager, lease: ContextManager) -> Iterator[None]:
    with turn, lease:
        yield


def describe(device: Any) -> dict[str, Any]:
    """What a result records about the device it ran on."""
    cc = getattr(device, "compute_capability", None)
    return {"index": device.index, "name": device.name, "uuid": getattr(device, "uuid", None),
            "cc": f"{cc[0]}.{cc[1]}" if cc else None, "pci_bus_id": getattr(device, "pci_bus_id", None)}


def select_devices(devices: Sequence[Any], wanted: str | None) -> list[Any]:
    """All visible devices, or those named by `--devices 0,1` (indices as kvdiag lists them)."""
    devices = list(devices)
    if not wanted:
        return devices
    chosen = []
    for part in wanted.split(","):
        part = part.strip()
        match = [d for d in devices if str(d.index) == part or (getattr(d, "uuid", None) or "") == part]
        if not match:
            known = ", ".join(str(d.index) for d in devices) or "none"
            raise UsageError(f"--devices: no visible GPU {part!r} (visible: {known})")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def assign(n_workers: int, devices: Sequence[Any]) -> list[Any]:
    """Worker i runs on device i mod n: workers spread evenly, every device busy."""
    if not devices:
        return [None] * n_workers
    return [devices[i % len(devices)] for i in range(n_workers)]
