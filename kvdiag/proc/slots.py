"""A pool of GPU slots shared by every kvdiag process on a machine.

Several GPU processes at once are fine on a large GPU (8 parallel sanitizer
processes on one H200 worked well), but two kvdiag invocations must not overload
one. So each device (a GPU UUID or index: the *device key*) gets a directory of N
lock files under a lock root::

    <root>/<device key>/slot-0.lock ... slot-{N-1}.lock   (+ gate.lock)

A slot is held by ``fcntl.flock(LOCK_EX | LOCK_NB)`` on its file; the holder writes
its pid into the file so that waiters can say who they are waiting for. flock
locks belong to the open file, so the kernel releases them when the holder exits
or is killed, even by SIGKILL: a crashed kvdiag never leaves a stale slot.

``acquire(k)`` takes k slots at once or none (no partial holding, so two waiters
cannot deadlock). Fairness: a waiter first takes ``gate.lock`` and keeps it while
it waits, so a stream of small requests cannot starve an exclusive one (timing
runs take every slot): the next request queues at the gate. The gate is never
held while slots are merely in use.

Leases are not re-entrant: a process that already holds slots and asks the same
pool again waits for itself. Lock descriptors are close-on-exec; the commands run
under a lease do not inherit them.

Security: the lock files are written (the holder's pid), so no other local user
may choose where they point. The default root is private to the user
(``$XDG_RUNTIME_DIR/kvdiag-locks``, else ``$KVDIAG_HOME/locks``), never a
predictable name in a shared /tmp. Every directory of the tree is created 0700 and
checked before use as kvdiag's home is (kvdiag.trust: a directory owned by the user, not
group- or world-writable without the sticky bit, no symlink on the way owned by another
user), else refused with one line. Lock files are opened with
``O_NOFOLLOW`` and mode 0600 and checked with ``fstat`` (a regular file owned by
the user with one link) before anything is written to them: a planted symlink or
hard link is refused and its target never touched.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kvdiag.errors import SlotTimeout, UnsafeLockPath, UsageError
from kvdiag.trust import trusted_dir

__all__ = [
    "DEFAULT_PER_SLOT_BYTES",
    "Lease",
    "SlotPool",
    "SlotTimeout",
    "UnsafeLockPath",
    "default_lock_root",
    "gpu_slots",
    "scan_slots",
    "slots_for_memory",
]

DEFAULT_PER_SLOT_BYTES = 16 * 1024**3
SCAN_PER_SLOT_BYTES = 8 * 1024**3
SCAN_MAX_SLOTS = 16
SLOTS_VARIABLE = "KVDIAG_GPU_SLOTS"
MAX_SLOTS_OVERRIDE = 64
POLL_S = 0.1
_SLOT_RE = re.compile(r"^slot-(\d+)\.lock$")


def default_lock_root() -> Path:
    """``$KVDIAG_LOCK_DIR``, else ``$XDG_RUNTIME_DIR/kvdiag-locks``, else ``$KVDIAG_HOME/locks``."""
    env = os.environ.get("KVDIAG_LOCK_DIR")
    if env:
        return Path(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "kvdiag-locks"
    from kvdiag.home import kvdiag_home

    return kvdiag_home() / "locks"


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if missing and check that only this user controls it
    (kvdiag.trust: the one check of the home's folders and the lock folders)."""
    return trusted_dir(path, "lock directory", "set KVDIAG_LOCK_DIR to a folder of your own", UnsafeLockPath)


def _open_lock(path: Path, flags: int) -> int:
    """Open a lock file without following links and check it is ours alone before use."""
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeLockPath(f"refusing lock file {path}: it is a symlink (left untouched)") from None
        raise
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "it is not a regular file"
    elif st.st_uid != os.getuid():
        problem = f"it is owned by uid {st.st_uid}"
    elif st.st_nlink != 1:
        problem = f"it has {st.st_nlink} links (a hard link to another file?)"
    if problem:
        os.close(fd)
        raise UnsafeLockPath(f"refusing lock file {path}: {problem} (left untouched)")
    return fd


def _pid_owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def slots_for_memory(total_bytes: int, per_slot_bytes: int = DEFAULT_PER_SLOT_BYTES,
                     max_slots: int = 8) -> int:
    """How many concurrent GPU processes a device of ``total_bytes`` gets: one per
    ``per_slot_bytes``, at least 1, at most ``max_slots``."""
    if per_slot_bytes <= 0 or max_slots < 1:
        raise ValueError("per_slot_bytes must be > 0 and max_slots >= 1")
    return max(1, min(int(max_slots), int(total_bytes) // int(per_slot_bytes)))


def gpu_slots(total_bytes: int, environ: dict[str, str] | None = None) -> int:
    """How many GPU processes one device runs at once: ``$KVDIAG_GPU_SLOTS`` when set, else
    slots_for_memory.

    Why a setting: one slot per 16 GiB is a guess at a process's memory, not a measurement; it
    stays the rule for runs and sweeps, whose steps may load a model. The variable lets a machine
    be measured with more (or fewer) at once; every kvdiag process sharing the GPU should be given
    the same value."""
    return _override(environ) or slots_for_memory(total_bytes)


def scan_slots(total_bytes: int | None, environ: dict[str, str] | None = None, cpus: int | None = None) -> int:
    """How many of a scan's case processes one device runs at once: ``$KVDIAG_GPU_SLOTS`` when set,
    else one per 8 GiB of the GPU's memory, at most 16 and at most the host's cores, and never fewer
    than a run gets (gpu_slots); one when the GPU's memory is unknown, as a run's rule gives then.

    Why its own rule: a scan's processes are test-backend-ops cases, far smaller than the 16 GiB a
    run's slot assumes. On the H200 (device session 12) the whole-op D2 scan's 16 processes used at
    most 10.6 GiB of GPU memory in all, the GPU was 14 % busy and 9.2 of 16 cores were; its wall
    was 57.6 s, against 67.0 s with 8 slots (device session 9), where the pool, not the GPU, had
    bounded it. 16 processes kept 9.2 cores busy, so the host's cores cap the pool; 16 is the most
    measured. A run's slots and a scan's are the same lock files: a scan beside a sweep shares them,
    and the two together never run more processes than the larger pool."""
    override = _override(environ)
    if override:
        return override
    if not total_bytes:
        return 1
    cores = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(slots_for_memory(total_bytes),
               slots_for_memory(total_bytes, SCAN_PER_SLOT_BYTES, max(1, min(SCAN_MAX_SLOTS, cores))))


def check_slots_setting(environ: dict[str, str] | None = None) -> None:
    """Refuse a bad ``$KVDIAG_GPU_SLOTS`` before a command runs anything, on any host: read only
    when a GPU's pool is sized, a bad value went unnoticed on a host without a GPU and, read in a
    sweep's worker, was recorded as the entry's error, exit 70 (issue 43). A UsageError: 64."""
    _override(environ)


def _override(environ: dict[str, str] | None) -> int | None:
    """``$KVDIAG_GPU_SLOTS`` as a count, None when unset; anything but 1 to 64 is a usage error."""
    value = (os.environ if environ is None else environ).get(SLOTS_VARIABLE, "").strip()
    if not value:
        return None
    if not re.fullmatch(r"[0-9]{1,3}", value) or not 1 <= int(value) <= MAX_SLOTS_OVERRIDE:
        raise UsageError(f"${SLOTS_VARIABLE} must be a whole number from 1 to {MAX_SLOTS_OVERRIDE}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Lease:
    device_key: str
    slots: tuple[int, ...]
    n_slots: int                 # the pool size this lease was taken from

    @property
    def exclusive(self) -> bool:
        return len(self.slots) >= self.n_slots


def _safe_key(device_key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(device_key))
    if not safe.strip("."):
        raise ValueError(f"device key {device_key!r} cannot name a lock directory")
    return safe


def _try_lock(fd: int, flags: int = fcntl.LOCK_EX) -> bool:
    try:
        fcntl.flock(fd, flags | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _read_pid(path: Path) -> int | None:
    try:
        fd = _open_lock(path, os.O_RDONLY)
    except (OSError, UnsafeLockPath):
        return None
    try:
        text = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


class SlotPool:
    def __init__(self, device_key: str, n_slots: int, root: Path | None = None):
        if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
            raise ValueError(f"n_slots must be an int >= 1, not {n_slots!r}")
        self.device_key = str(device_key)
        self.n_slots = n_slots
        self.root = Path(root) if root is not None else default_lock_root()
        self.directory = self.root / _safe_key(self.device_key)

    # ------------------------------------------------------------------ files
    def _slot_path(self, i: int) -> Path:
        return self.directory / f"slot-{i}.lock"

    def _ensure_dir(self) -> None:
        """Create the directory and all N slot files, so that a pool opened with a
        smaller N sees them (its exclusive lease must cover them too)."""
        private_dir(self.root)
        private_dir(self.directory)
        for i in range(self.n_slots):
            path = self._slot_path(i)
            if not path.exists():
                os.close(self._open(path))

    def _open(self, path: Path) -> int:
        return _open_lock(path, os.O_RDWR | os.O_CREAT)

    def _all_slot_indices(self) -> list[int]:
        """This pool's slots plus any other slot files in the directory (a pool
        opened with a larger N by another invocation): exclusive takes them all."""
        found = set(range(self.n_slots))
        try:
            for name in os.listdir(self.directory):
                m = _SLOT_RE.match(name)
                if m:
                    found.add(int(m.group(1)))
        except FileNotFoundError:
            pass
        return sorted(found)

    @staticmethod
    def _mark(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    @staticmethod
    def _release(fd: int) -> None:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _try_take(self, indices: list[int], k: int) -> dict[int, int] | None:
        """Take k of ``indices`` now, or nothing."""
        taken: dict[int, int] = {}
        for i in indices:
            fd = self._open(self._slot_path(i))
            if _try_lock(fd):
                taken[i] = fd
                if len(taken) == k:
                    for f in taken.values():
                        self._mark(f)
                    return taken
            else:
                os.close(fd)
        for f in taken.values():
            fcntl.flock(f, fcntl.LOCK_UN)
            os.close(f)
        return None

    # ------------------------------------------------------------------ API
    def holders(self) -> list[tuple[int, int | None]]:
        """(slot, pid) of every slot held now; pid None if the holder has not written it yet."""
        out: list[tuple[int, int | None]] = []
        if not self.directory.is_dir():
            return out
        for i in self._all_slot_indices():
            path = self._slot_path(i)
            if not path.exists():
                continue
            try:
                fd = _open_lock(path, os.O_RDONLY)
            except UnsafeLockPath:
                raise
            except OSError:
                continue
            try:
                if _try_lock(fd, fcntl.LOCK_SH):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                else:
                    out.append((i, _read_pid(path)))
            finally:
                os.close(fd)
        return out

    def _describe_holders(self, holders: list[tuple[int, int | None]], gate_pid: int | None) -> str:
        by_pid: dict[int | None, list[int]] = {}
        for slot, pid in holders:
            by_pid.setdefault(pid, []).append(slot)
        parts = []
        for pid, slots in sorted(by_pid.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            who = f"pid {pid}" if pid is not None else "a starting process"
            owner = _pid_owner(pid) if pid is not None else None
            if owner is not None and owner != os.getuid():
                who += f" (uid {owner}, another user)"
            noun = "slot" if len(slots) == 1 else "slots"
            parts.append(f"{who} ({noun} {','.join(map(str, slots))})")
        text = "held by " + ", ".join(parts) if parts else "no slot held"
        if gate_pid is not None:
            text += f"; pid {gate_pid} is queued first"
        return text

    @contextmanager
    def acquire(self, k: int = 1, timeout: float | None = None,
                on_wait: Callable[[str], None] | None = None) -> Iterator[Lease]:
        """Hold k slots of this device for the ``with`` block.

        Waits (polling every 0.1 s) up to ``timeout`` seconds (None: no limit, 0:
        one try) and raises :class:`SlotTimeout` naming the holders' pids.
        ``on_wait(message)`` is told who holds the slots whenever that changes.
        """
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.n_slots:
            raise ValueError(f"k must be between 1 and {self.n_slots}, not {k!r}")
        with self._acquire(k, list(range(self.n_slots)), timeout, on_wait) as lease:
            yield lease

    @contextmanager
    def exclusive(self, timeout: float | None = None,
                  on_wait: Callable[[str], None] | None = None) -> Iterator[Lease]:
        """Hold every slot of the device (for timing runs)."""
        self._ensure_dir()
        indices = self._all_slot_indices()
        with self._acquire(len(indices), indices, timeout, on_wait) as lease:
            yield lease

    @contextmanager
    def _acquire(self, k: int, indices: list[int], timeout: float | None,
                 on_wait: Callable[[str], None] | None) -> Iterator[Lease]:
        self._ensure_dir()
        start = time.monotonic()
        deadline = None if timeout is None else start + max(0.0, timeout)
        last_msg: str | None = None
        gate_path = self.directory / "gate.lock"

        def waiting(gate_pid: int | None) -> None:
            nonlocal last_msg
            holders = self.holders()
            msg = (f"waiting for {k} of {len(indices)} GPU slots on {self.device_key}: "
                   + self._describe_holders(holders, gate_pid))
            if deadline is not None and time.monotonic() >= deadline:
                raise SlotTimeout(
                    f"gave up after {timeout:.1f} s waiting for {k} of {len(indices)} GPU slots on "
                    f"{self.device_key}: " + self._describe_holders(holders, gate_pid),
                    holders)
            if on_wait is not None and msg != last_msg:
                last_msg = msg
                try:
                    on_wait(msg)
                except Exception:  # a progress display must not break the lock
                    pass
            time.sleep(POLL_S if deadline is None else
                       max(0.0, min(POLL_S, deadline - time.monotonic())))

        taken: dict[int, int] | None = None
        gate = self._open(gate_path)
        gate_held = False
        try:
            while not _try_lock(gate):
                waiting(_read_pid(gate_path))
            gate_held = True
            self._mark(gate)
            while True:
                taken = self._try_take(indices, k)
                if taken is not None:
                    break
                waiting(None)
        finally:
            if gate_held:
                self._release(gate)
            else:
                os.close(gate)
        try:
            yield Lease(self.device_key, tuple(sorted(taken)), len(indices))
        finally:
            for fd in taken.values():
                try:
                    self._release(fd)
                except OSError:
                    pass
