"""SlotPool: k of N flock'ed slot files per device, exclusive, released when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from proc_helpers import REPO, SCENARIOS, child_env
from kvdiag.errors import KvdiagError
from kvdiag.proc.slots import (
    DEFAULT_PER_SLOT_BYTES,
    SlotPool,
    SlotTimeout,
    default_lock_root,
    slots_for_memory,
)

GIB = 1024**3


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "locks"


@pytest.mark.parametrize("total,expected", [
    (141 * 10**9, 8),          # H200: 141 GB -> capped at 8
    (80 * GIB, 5),
    (24 * GIB, 1),
    (40 * GIB, 2),
    (8 * GIB, 1),              # smaller than one slot: still 1
    (0, 1),
])
def test_slots_for_memory(total, expected):
    assert slots_for_memory(total) == expected


def test_slots_for_memory_options():
    assert DEFAULT_PER_SLOT_BYTES == 16 * GIB
    assert slots_for_memory(1000 * GIB, max_slots=4) == 4
    assert slots_for_memory(64 * GIB, per_slot_bytes=8 * GIB, max_slots=16) == 8
    with pytest.raises(ValueError):
        slots_for_memory(GIB, per_slot_bytes=0)


def test_default_lock_root(monkeypatch, tmp_path):
    monkeypatch.setenv("KVDIAG_LOCK_DIR", str(tmp_path / "x"))
    assert default_lock_root() == tmp_path / "x"
    monkeypatch.delenv("KVDIAG_LOCK_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_lock_root() == tmp_path / "kvdiag-locks"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("KVDIAG_HOME", str(tmp_path / "home"))
    assert default_lock_root() == tmp_path / "home" / "locks"


def test_acquire_k_slots_and_release(root):
    pool = SlotPool("GPU-0000aaaa", 4, root=root)
    with pool.acquire(2) as lease:
        assert lease.slots == (0, 1) and lease.device_key == "GPU-0000aaaa"
        assert not lease.exclusive
        assert pool.holders() == [(0, os.getpid()), (1, os.getpid())]
        assert sorted(p.name for p in pool.directory.glob("slot-*.lock")) == [
            "slot-0.lock", "slot-1.lock", "slot-2.lock", "slot-3.lock"]
    assert pool.holders() == []


def test_slots_are_shared_between_pools_of_the_same_device(root):
    a = SlotPool("0", 4, root=root)
    b = SlotPool("0", 4, root=root)
    other = SlotPool("1", 4, root=root)
    with a.acquire(3):
        with b.acquire(1, timeout=0) as lease:
            assert lease.slots == (3,)
            with pytest.raises(SlotTimeout) as info:
                with b.acquire(1, timeout=0.3):
                    pass
            assert info.value.pids == [os.getpid()]
            assert f"pid {os.getpid()}" in str(info.value)
            assert isinstance(info.value, KvdiagError)
        with other.acquire(4, timeout=0):          # another device is not affected
            pass


def test_exclusive_needs_every_slot(root):
    pool = SlotPool("GPU-x", 3, root=root)
    with pool.acquire(1):
        t0 = time.monotonic()
        with pytest.raises(SlotTimeout, match="3 of 3"):
            with pool.exclusive(timeout=0.3):
                pass
        assert time.monotonic() - t0 >= 0.25
    with pool.exclusive(timeout=0) as lease:
        assert lease.slots == (0, 1, 2) and lease.exclusive
        with pytest.raises(SlotTimeout):
            with pool.acquire(1, timeout=0):
                pass


def test_exclusive_covers_slots_of_a_larger_pool(root):
    big = SlotPool("dev", 8, root=root)
    small = SlotPool("dev", 2, root=root)
    with big.acquire(1) as lease:
        assert lease.slots == (0,)
    with big.acquire(1):
        pass
    # slot files 0..7 exist now: exclusive on the 2-slot view must still take all 8
    with small.exclusive(timeout=0) as lease:
        assert lease.slots == tuple(range(8))
        with pytest.raises(SlotTimeout):
            with big.acquire(1, timeout=0):
                pass


def test_waiter_gets_the_slot_when_it_is_released_and_is_told_who_holds_it(root):
    pool = SlotPool("dev", 1, root=root)
    held = threading.Event()
    release = threading.Event()

    def holder():
        with SlotPool("dev", 1, root=root).acquire(1):
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(10)
        messages: list[str] = []

        def on_wait(msg):
            messages.append(msg)
            release.set()              # the holder lets go once we say we are waiting

        with pool.acquire(1, timeout=10, on_wait=on_wait) as lease:
            assert lease.slots == (0,)
        assert messages and f"pid {os.getpid()}" in messages[0] and "slot 0" in messages[0]
    finally:
        release.set()
        t.join(10)


def test_slot_of_a_killed_holder_is_freed_by_the_kernel(root):
    proc = subprocess.Popen([sys.executable, str(SCENARIOS / "holds_slot.py"), str(root), "gpu0", "2", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), cwd=REPO)
    try:
        line = proc.stdout.readline().decode()
        assert line.strip() == "held 0,1", proc.stderr.read().decode()
        pool = SlotPool("gpu0", 2, root=root)
        assert pool.holders() == [(0, proc.pid), (1, proc.pid)]
        with pytest.raises(SlotTimeout) as info:
            with pool.acquire(1, timeout=0.2):
                pass
        assert info.value.pids == [proc.pid] and str(proc.pid) in str(info.value)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with pool.exclusive(timeout=5) as lease:       # no stale lock survives SIGKILL
            assert lease.slots == (0, 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_a_queued_exclusive_request_is_not_starved_by_small_ones(root):
    pool = SlotPool("dev", 2, root=root)
    first = pool.acquire(1)
    first.__enter__()
    queued = threading.Event()
    got_exclusive = threading.Event()
    errors: list[BaseException] = []

    def exclusive_waiter():
        try:
            with SlotPool("dev", 2, root=root).exclusive(timeout=10, on_wait=lambda m: queued.set()):
                got_exclusive.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            queued.set()

    t = threading.Thread(target=exclusive_waiter)
    t.start()
    try:
        assert queued.wait(10)
        # slot 1 is free, but the exclusive request is queued at the gate first
        with pytest.raises(SlotTimeout, match="queued first"):
            with pool.acquire(1, timeout=0.3):
                pass
    finally:
        first.__exit__(None, None, None)
        t.join(10)
    assert not errors and got_exclusive.is_set()


def test_bad_requests(root):
    pool = SlotPool("dev", 2, root=root)
    for k in (0, 3, True):
        with pytest.raises(ValueError):
            with pool.acquire(k):
                pass
    with pytest.raises(ValueError):
        SlotPool("dev", 0, root=root)
    with pytest.raises(ValueError):
        SlotPool("..", 1, root=root)


def test_device_keys_stay_inside_the_lock_root(root):
    pool = SlotPool("GPU-1/../../etc", 1, root=root)
    assert pool.directory.parent == root
    with pool.acquire(1) as lease:
        assert lease.device_key == "GPU-1/../../etc"


def test_gpu_slots_is_the_memory_rule_unless_the_machine_is_given_a_count(monkeypatch):
    from kvdiag.engine.scan.session import default_workers
    from kvdiag.errors import UsageError
    from kvdiag.proc.slots import SLOTS_VARIABLE, gpu_slots

    h200 = 150_109_880_320        # total_memory_bytes of the H200 in device session 9
    assert gpu_slots(h200, {}) == slots_for_memory(h200) == 8
    assert gpu_slots(h200, {SLOTS_VARIABLE: "16"}) == 16
    assert gpu_slots(h200, {SLOTS_VARIABLE: " 2 "}) == 2
    for bad in ("0", "65", "-1", "eight", "1.5"):
        with pytest.raises(UsageError, match=r"^\$KVDIAG_GPU_SLOTS must be a whole number from 1 to 64"):
            gpu_slots(h200, {SLOTS_VARIABLE: bad})

    class Device:
        total_memory_bytes = h200

    monkeypatch.setenv(SLOTS_VARIABLE, "12")
    assert default_workers(Device(), 1, batched=True) == 12      # -j's default follows the pool


H200 = 150_109_880_320            # total_memory_bytes of the H200 (device sessions 9 and 12)


@pytest.mark.parametrize(("total", "cpus", "expected"), [
    (H200, 16, 16),               # device session 12: 16 processes, 10.6 GiB in all, 57.6 s
    (H200, 128, 16),              # 16 is the most measured
    (H200, 12, 12),               # 16 processes kept 9.2 cores busy: the host's cores cap the pool ...
    (H200, 2, 8),                 # ... but never below a run's rule (one per 16 GiB, at most 8)
    (85_899_345_920, 16, 10),     # an 80 GiB H100: one per 8 GiB
    (8 * GIB, 16, 1),
    (2 * GIB, 16, 1),
    (None, 16, 1),                # the GPU's memory unknown: one at a time
])
def test_a_scans_case_processes_get_their_own_smaller_slots(total, cpus, expected):
    from kvdiag.proc.slots import scan_slots

    assert scan_slots(total, {}, cpus=cpus) == expected


def test_the_variable_sets_a_scans_pool_as_it_sets_a_runs(monkeypatch):
    from kvdiag.engine.scan.session import default_workers
    from kvdiag.errors import UsageError
    from kvdiag.proc.slots import SLOTS_VARIABLE, gpu_slots, scan_slots

    assert scan_slots(H200, {SLOTS_VARIABLE: "4"}, cpus=16) == gpu_slots(H200, {SLOTS_VARIABLE: "4"}) == 4
    assert gpu_slots(H200, {}) == 8                                   # runs and sweeps keep 16 GiB a slot
    with pytest.raises(UsageError, match=r"^\$KVDIAG_GPU_SLOTS must be a whole number"):
        scan_slots(H200, {SLOTS_VARIABLE: "0"})

    class Device:
        total_memory_bytes = H200

    monkeypatch.delenv(SLOTS_VARIABLE, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert default_workers(Device(), 1, batched=True) == 16            # the scan's -j follows its own pool
    assert default_workers(Device(), 2, batched=True) == 8             # shared among two GPUs
