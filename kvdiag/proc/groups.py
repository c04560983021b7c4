"""Process groups on Linux: who is in one, killing it, reaping what it leaves.

Shared by the runner (commands that run to completion) and the server executor
(a long-lived llama-server): both start their child in its own session, kill the
whole group, and reap the orphans this process adopted as a child subreaper.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

_subreaper_done = False
_subreaper_lock = threading.Lock()
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux only, once).

    Orphaned grandchildren are re-parented to init otherwise, and not every init
    reaps them (a container's pid 1 often does not).
    """
    global _subreaper_done
    with _subreaper_lock:
        if _subreaper_done:
            return True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                _subreaper_done = True
        except (OSError, AttributeError):
            pass
        return _subreaper_done


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a pid from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    tail = data[data.rfind(b")") + 2:].split()
    try:
        return tail[0].decode(), int(tail[1]), int(tail[2])
    except (IndexError, ValueError):
        return None


def group_members(pgid: int) -> list[tuple[int, str, int]] | None:
    """(pid, state, ppid) of every process whose group is ``pgid``; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for e in entries:
        if not e.isdigit():
            continue
        st = proc_stat(int(e))
        if st is not None and st[2] == pgid:
            out.append((int(e), st[0], st[1]))
    return out


def killpg(pgid: int, sig: int) -> None:
    """Signal a group that may already be gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_pid(pid: int, sig: int) -> None:
    """Signal a process that may already be gone."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


#: Every SIGINT/SIGTERM/SIGHUP this process received, in order (kvdiag.proc.signals reads it).
SIGNALS_SEEN: list[int] = []
_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigint_deferred() -> Iterator[list[int]]:
    """While cleaning up, a Ctrl-C (or SIGTERM, SIGHUP) is noted (in the yielded list)
    instead of aborting the cleanup."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def note(signum, _frame):
        got.append(signum)
        SIGNALS_SEEN.append(signum)

    try:
        old = {sig: signal.signal(sig, note) for sig in _DEFERRED}
    except ValueError:  # pragma: no cover - not the main interpreter
        yield got
        return
    try:
        yield got
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below ``root``, whatever its session or group, from /proc."""
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if not e.isdigit():
            continue
        st = proc_stat(int(e))
        if st is not None:
            children.setdefault(st[1], []).append(int(e))
            states[int(e)] = st[0]
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if states.get(pid) not in ("Z", "X"):
            out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def reap_and_list_live(pgid: int, leader: int) -> list[int] | None:
    """Reap the group's zombies this process adopted; return the pids still to wait for.

    A zombie whose parent is not this process still counts: its parent (a member
    of the group being killed) has not exited yet, and when it does the zombie is
    re-parented to us (we are its subreaper) and must be reaped then, or it
    outlives the command. The leader's zombie is left to whoever started it
    (sh or Popen). None when /proc cannot be read (the caller then falls back to
    killpg(pgid, 0)).
    """
    members = group_members(pgid)
    if members is None:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return None
    me = os.getpid()
    live = []
    for pid, state, ppid in members:
        if state in ("Z", "X"):
            if pid == leader:
                continue
            if ppid == me:
                try:
                    reaped, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                if reaped:
                    continue
                # /proc says Z but the kernel will not hand it over yet: a multi-threaded
                # process's main thread is a zombie while its other threads still exit.
                # Still ours to reap: keep waiting (measured: a threaded stand-in server
                # left as a zombie about 1 run in 10 on a loaded 2-core machine).
        live.append(pid)
    return live


def reap_escaped(pids: list[int], wait_s: float = 2.0) -> None:
    """Reap the killed descendants that left the group: once their parent is gone they are
    re-parented to us (the subreaper) as zombies, and nobody else will reap them."""
    end = time.monotonic() + wait_s
    left = list(pids)
    while left and time.monotonic() < end:
        for pid in list(left):
            try:
                reaped, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:          # not (yet) ours: gone, or its parent still holds it
                if proc_stat(pid) is None:
                    left.remove(pid)
                continue
            if reaped:
                left.remove(pid)
        if left:
            time.sleep(0.01)


def leader_exit(pid: int) -> tuple[bool, int | None]:
    """(exited, exit code: negative = the signal) of our child ``pid``, asked with
    ``waitid(WNOWAIT)``: the child is not reaped and no lock is taken.

    Why not sh's ``is_alive()``: it takes sh's wait lock and releases it in a ``finally``
    entered a few bytecodes after the acquire. A Ctrl-C (or SIGTERM, SIGHUP: kvdiag raises
    for those too) whose handler runs in between leaves the lock held for ever, and the
    ``wait()`` that reaps the leader then blocks for good (seen on CI: a verify still running
    30 s after its SIGINT). So the loops that a signal may interrupt ask the kernel instead;
    sh's lock is taken only inside :func:`sigint_deferred` (ending the group, reaping).
    The code is None when the child was reaped already (sh's own thread polls it too)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True, None
    if info is None:
        return False, None
    return True, info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
