"""The one function every external command of kvdiag goes through: :func:`run_command`.

Backend: the ``sh`` package (2.x). ``sh.Command(path)(..., _bg=True, _new_session=True)``
forks the child into its own session (so its own process group) and reaps the child
it started. The child's stdout and stderr are descriptors kvdiag made (stdout a
pseudo-terminal in raw mode when ``tty=True``, stderr always a pipe) and ONE thread of
kvdiag reads both (``kvdiag.proc.pump``: the combined log keeps the arrival order, and a
chunk of output costs one pass, not one Python call per line as sh's readers did).
kvdiag does the rest itself, because ``sh`` does not:

* the deadline: we poll the leader ourselves (sh's ``_timeout`` signals only the child,
  not its group; its ``is_alive()`` lock, see ``groups.leader_exit``) and, on timeout or
  Ctrl-C, send SIGTERM to the group with ``os.killpg``, then SIGKILL after ``kill_grace``;
* grandchildren: the group is scanned through ``/proc`` until no live member is
  left. Orphaned grandchildren are reparented to init, and not every init reaps
  them (this machine's pid 1 does not), so the kvdiag process makes itself a
  *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux) the first time
  it runs a command and reaps the orphans of each command's group itself, by
  pid, never with ``waitpid(-1)`` (which would steal sh's statuses);
* the logs: the pump writes whole lines, as raw bytes, to the per-stream log and to
  the combined log straight away (unbuffered files), and
  ``<name>.cmd.json`` is written before the start and rewritten at the end;
* Ctrl-C: the KeyboardInterrupt lands in our polling loop in the main thread; we
  kill the group, let sh reap and drain, write the logs, then raise
  :class:`CommandInterrupted` carrying the partial result.

* a failed exec: sh raises ``ForkException`` but never reaps that child (a zombie
  per failed run); the child reports its pid through a pipe from
  ``_preexec_fn`` and we reap it, then raise :class:`CommandNotFound`;
* ``sh``'s ``wait(timeout=)`` blocks; we poll ourselves and call ``wait()`` only once
  the group is dead, with signals deferred; the pump then reads what the group left
  (to the end of each descriptor, or until nothing more comes: a descendant that
  escaped the group may hold one open) before the logs are closed.

Verified on this machine with the scenario programs in ``tests/scenarios``: the pty
line endings (the pty is set raw, and we normalise ``\\r\\n`` anyway), zombie
reaping, SIGINT handling, a few MB of output with nothing lost, a line printed
before SIGABRT kept under ``tty=True`` (the same suite passes on the GPU machine's
Python 3.12 with the real compute-sanitizer). Caveats of this backend: ``sh`` forks from
Python (``os.fork``), so on Python >= 3.12 a run started while other threads are
alive gets a fork-with-threads DeprecationWarning; and ``on_output`` is called in
the pump's thread, so a slow callback slows reading.

A grandchild that leaves the group (``setsid``) escapes the group kill: on a
timeout or an interrupt the leader's descendants are also found through /proc
and killed; one whose parent already exited is re-parented to kvdiag (the
subreaper) and ended when kvdiag exits (``kvdiag.proc.signals.end_descendants``).
"""

from __future__ import annotations

import functools
import math
import os
import signal as _signal
import threading
import time
import warnings
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Sequence

import sh

# sh forks from Python; on Python >= 3.12 a fork while other threads run (scan
# workers, target inspections) warns. The child only resets signals and execs,
# which is the fork-then-exec pattern the warning exempts in spirit.
warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded, use of fork\(\) may lead to deadlocks",
                        category=DeprecationWarning)

from kvdiag.errors import CommandError, CommandInterrupted, CommandNotFound  # noqa: E402 - after the filter
from kvdiag.fileio import write_json  # noqa: E402
from kvdiag.proc.groups import (become_subreaper, descendants, kill_pid, killpg, leader_exit,  # noqa: E402
                                 proc_stat, reap_and_list_live, reap_escaped, sigint_deferred)
from kvdiag.proc.limit import bounded  # noqa: E402
from kvdiag.proc.logsink import LogSink  # noqa: E402
from kvdiag.proc.pump import OutputPump, child_ends, close_all  # noqa: E402
from kvdiag.proc.result import CommandResult  # noqa: E402

__all__ = [
    "CommandError",
    "CommandNotFound",
    "CommandInterrupted",
    "CommandResult",
    "StartedCommand",
    "run_command",
    "resolve_program",
    "start_command",
]

_POLL_S = 0.05          # how often we look at the child while it runs
_AFTER_KILL_WAIT_S = 10.0   # how long we wait for the group after SIGKILL (D-state GPU processes)


# --------------------------------------------------------------------------- helpers

def _effective_env(env: Mapping[str, str] | None, overrides: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ if env is None else env)
    for k, v in (overrides or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"environment entries must be str: {k!r}={v!r}")
        merged[k] = v
    return merged


def resolve_program(program: str | os.PathLike, *, path_env: str | None = None,
                    cwd: Path | None = None) -> str:
    """Absolute path of the program to execute, or raise :class:`CommandNotFound`.

    With a slash: that file (relative to ``cwd`` when given). Without: looked up on
    ``path_env`` (the child's PATH), like execvp.
    """
    prog = os.fspath(program)
    if not prog:
        raise CommandNotFound("cannot run an empty program name")
    if "/" in prog:
        candidate = Path(prog).expanduser()
        if not candidate.is_absolute() and cwd is not None:
            candidate = Path(cwd) / candidate
        candidate = Path(os.path.abspath(candidate))
        if not candidate.exists():
            raise CommandNotFound(f"program not found: {prog}")
        if not candidate.is_file():
            raise CommandNotFound(f"program is not a file: {prog}")
        if not os.access(candidate, os.X_OK):
            raise CommandNotFound(f"program is not executable: {prog} (no execute permission)")
        try:
            return str(sh.Command(str(candidate)))
        except sh.CommandNotFound:  # pragma: no cover - checked above
            raise CommandNotFound(f"program cannot be executed: {prog}") from None
    search = (path_env if path_env is not None else os.defpath).split(os.pathsep)
    search = [p or "." for p in search]
    try:
        return str(sh.Command(prog, search_paths=search))
    except sh.CommandNotFound:
        pass
    # sh only reports "not found"; say whether it exists but lacks the x bit.
    for d in search:
        cand = Path(d) / prog
        if cand.is_file():
            raise CommandNotFound(f"program is not executable: {cand} (no execute permission)")
    raise CommandNotFound(f"program not found on PATH: {prog}")


def _child_setup(pid_fd: int) -> None:
    """In the forked child, before exec.

    Undo dispositions a plain shell would not pass on (sh ignores SIGHUP in
    background children, Python ignores SIGXFSZ), and tell the parent our pid:
    when the exec fails, sh raises ForkException without reaping the child, and
    only this pid lets us reap it.
    """
    for name in ("SIGHUP", "SIGXFSZ"):
        sig = getattr(_signal, name, None)
        if sig is not None:
            _signal.signal(sig, _signal.SIG_DFL)
    os.write(pid_fd, str(os.getpid()).encode())


def _read_child_pid(pid_r: int) -> int | None:
    try:
        data = os.read(pid_r, 32)
    except OSError:
        return None
    finally:
        os.close(pid_r)
    try:
        return int(data)
    except ValueError:
        return None


def _write_json(path: Path, doc: dict) -> None:
    write_json(path, doc)


# --------------------------------------------------------------------------- starting


class StartedCommand:
    """A program running in its own session and process group, its output streaming to its logs.

    :func:`run_command` holds one until the program ends; the server executor holds
    one while it talks to the server. Either way the program was started, is
    watched and is ended the same way: ``alive()``/``status()`` while it runs,
    ``end_group()`` to make sure nothing of its group lives on, ``finish()`` to
    drain the output and close the logs.
    """

    def __init__(self, running, pump: OutputPump, *, args: list[str], executable: str, log_dir: Path, name: str,
                 sink: LogSink, started_at: str, started: float, cmd_json: Path, doc: dict):
        self.running = running
        self.pump = pump
        self.args = args
        self.executable = executable
        self.log_dir = log_dir
        self.name = name
        self.sink = sink
        self.started_at = started_at
        self.started = started          # time.monotonic() just before the start
        self.cmd_json = cmd_json
        self.doc = doc                  # what <name>.cmd.json says; record() rewrites it
        self.pid: int = running.pid
        self.pgid: int = running.pgid

    @property
    def paths(self) -> dict[str, Path]:
        return self.sink.paths

    def alive(self) -> bool:
        """Whether the leader still runs (never reaps it, never takes sh's lock: ``groups.leader_exit``)."""
        return self.status() is None and not leader_exit(self.pid)[0]

    def status(self) -> int | None:
        """The leader's exit code once it exited (negative: the signal), else None. sh's noted code comes
        first: once sh's thread reaped the leader, its pid may be another child's (a pool starts many)."""
        noted = getattr(self.running.process, "exit_code", None)
        if noted is not None:
            return noted
        exited, code = leader_exit(self.pid)
        return code if exited else None

    def quiet_for(self) -> float:
        """Seconds since the last output arrived (since the start when none did)."""
        return time.monotonic() - self.sink.last_output

    def end_group(self, *, terminate: bool, grace: float) -> tuple[list[int], str | None]:
        """Nothing of the group lives on afterwards: (survivors after SIGKILL, the last signal we sent).

        ``terminate`` False: the group is signalled only when something of it still lives."""
        return _finish_group(self.running, self.pid, self.pgid, terminate=terminate, grace=grace)

    def finish(self, survivors: Sequence[int]) -> int | None:
        """After end_group(): the leader's exit code (None if it survived), all output drained, logs closed."""
        exit_code = _final_status(self.running, alive=bool(survivors and self.pid in survivors))
        self.pump.finish()
        self.sink.close()
        return exit_code

    def record(self) -> None:
        _write_json(self.cmd_json, self.doc)


def start_command(argv: Sequence[str | os.PathLike], *, log_dir: Path, name: str,
                  env: Mapping[str, str] | None = None, env_overrides: Mapping[str, str] | None = None,
                  cwd: Path | None = None, tty: bool = False,
                  on_output: Callable[[str, str], None] | None = None,
                  record: Mapping[str, object] | None = None) -> StartedCommand:
    """Start ``argv`` in its own session and return at once (see :func:`run_command` for the rules).

    ``<name>.cmd.json`` is written before the start (``record`` adds keys to it);
    a program that is missing or cannot be executed raises :class:`CommandNotFound`
    and leaves nothing running.
    """
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ValueError("a command needs a non-empty argv")
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad log name {name!r}: one plain file-name component is needed")
    if cwd is not None and not Path(cwd).is_dir():
        raise CommandError(f"working directory does not exist: {cwd}")
    child_env = _effective_env(env, env_overrides)
    executable = resolve_program(args[0], path_env=child_env.get("PATH", os.defpath), cwd=cwd)

    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    cmd_json = log_dir / f"{name}.cmd.json"
    sink = LogSink(log_dir, name, tty, on_output)
    become_subreaper()
    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    doc: dict = {
        "name": name, "argv": args, "executable": executable, "cwd": str(cwd) if cwd is not None else None,
        "env_overrides": dict(env_overrides or {}), "env_replaced": env is not None, "tty": tty,
        **dict(record or {}),
        "started_at": started_at, "pid": None, "logs": {k: p.name for k, p in sink.paths.items()}, "result": None,
    }
    _write_json(cmd_json, doc)
    started = time.monotonic()
    running, pump = _spawn(args, executable, child_env, cwd, tty, sink, cmd_json, doc)
    command = StartedCommand(running, pump, args=args, executable=executable, log_dir=log_dir, name=name, sink=sink,
                             started_at=started_at, started=started, cmd_json=cmd_json, doc=doc)
    doc["pid"] = command.pid
    command.record()
    return command


def _spawn(args: list[str], executable: str, child_env: dict[str, str], cwd: Path | None, tty: bool,
           sink: LogSink, cmd_json: Path, doc: dict):
    """(sh's RunningCommand for the child, the started output pump), or CommandNotFound (the failed
    child reaped, the logs closed). sh starts and reaps the child; it does not read its output: the
    child writes into descriptors kvdiag made, and the pump reads them (`kvdiag.proc.pump`)."""
    devnull = open(os.devnull, "rb")
    pid_r, pid_w = os.pipe()
    ours, theirs = child_ends(tty)
    try:
        running = sh.Command(executable)(
            *args[1:],
            _bg=True, _bg_exc=False, _new_session=True,
            _in=devnull, _out=theirs["stdout"], _err=theirs["stderr"],
            _env=child_env, _cwd=str(cwd) if cwd is not None else None,
            _ok_code=list(range(-128, 256)),   # every status is a result, not an exception
            _no_out=True, _no_err=True, _no_pipe=True,
            _preexec_fn=functools.partial(_child_setup, pid_w),
        )
    except sh.ForkException as exc:
        close_all((pid_w,))
        pid_w, failed, pid_r = -1, _read_child_pid(pid_r), -1
        if failed is not None:
            try:
                os.waitpid(failed, 0)      # sh leaves the failed child unreaped
            except ChildProcessError:
                pass
        close_all(ours)
        sink.close()
        last = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = last[-1].strip() if last else "exec failed"
        doc["result"] = {"error": f"cannot execute: {reason}"}
        _write_json(cmd_json, doc)
        raise CommandNotFound(f"cannot execute {args[0]}: {reason}") from None
    except BaseException:
        close_all(ours)
        sink.close()
        raise
    finally:
        close_all((*theirs.values(), *(fd for fd in (pid_w, pid_r) if fd >= 0)))   # the child has its copies
        devnull.close()
    pump = OutputPump(sink, ours)
    pump.start()
    return running, pump


# --------------------------------------------------------------------------- the runner


def run_command(argv: Sequence[str | os.PathLike], *, timeout: float, log_dir: Path, name: str,
                env: Mapping[str, str] | None = None, env_overrides: Mapping[str, str] | None = None,
                cwd: Path | None = None, tty: bool = False, on_output: Callable[[str, str], None] | None = None,
                kill_grace: float = 3.0, cancel: threading.Event | None = None, quiet_timeout: float | None = None,
                ) -> CommandResult:
    """Run ``argv`` (a list, never a shell string) in its own session and process group.

    Output goes, as it arrives, to ``log_dir/<name>.{stdout,stderr,combined}.log``;
    ``log_dir/<name>.cmd.json`` records the command and, at the end, its result.
    On ``timeout`` (seconds, lowered to a ceiling kvdiag.proc.limit holds) or Ctrl-C the whole group
    gets SIGTERM, then SIGKILL after ``kill_grace``. ``env`` replaces the inherited environment (default:
    ``os.environ``); ``env_overrides`` is applied on top and recorded. ``tty=True``
    gives stdout a pseudo-terminal so C stdio line-buffers. ``on_output(stream,
    line)`` is called per complete line (without its newline) from the pump's thread;
    its exceptions are counted in cmd.json, never raised.

    ``quiet_timeout``: the command also times out when it printed nothing for that many
    seconds (a scan batch of many cases: each case may take as long as it would alone,
    and one that hangs does not cost the whole batch's allowance).

    ``cancel``: another thread (a scan's Ctrl-C handler) sets it to stop this command; the group is
    killed as on Ctrl-C and the result, marked interrupted, is returned (not raised: the caller asked).

    Raises :class:`CommandNotFound` before starting anything when the program is
    missing or not executable, and :class:`CommandInterrupted` (with ``.result``)
    after Ctrl-C. A program's failure is a result, never an exception.
    """
    if timeout is None or not (math.isfinite(timeout) and timeout > 0):     # NaN compares false: no deadline
        raise ValueError(f"timeout must be a finite positive number of seconds, not {timeout!r}")
    timeout = bounded(timeout)          # a command's ceiling on every child (kvdiag.proc.limit)
    # A Ctrl-C while the child starts (its cmd.json fsynced) waits for a group to stop, never leaves one running.
    with sigint_deferred() as early_sigints:
        command = start_command(argv, log_dir=log_dir, name=name, env=env, env_overrides=env_overrides, cwd=cwd,
                                tty=tty, on_output=on_output,
                                record={"timeout_s": timeout, "kill_grace_s": kill_grace})
    watch = _Watch()
    watch.interrupted = bool(early_sigints)
    try:
        if not watch.interrupted:
            watch.until_done(command, deadline=command.started + timeout, quiet_timeout=quiet_timeout, cancel=cancel)
    except KeyboardInterrupt:
        watch.interrupted = True
    with sigint_deferred() as extra_sigints:
        result = _finish(command, watch, timeout=timeout, kill_grace=kill_grace)
        if extra_sigints:
            watch.interrupted = True
    if watch.cancelled and not extra_sigints:
        return result
    if watch.interrupted:
        if not result.interrupted:  # Ctrl-C arrived during the cleanup only
            result = replace(result, interrupted=True)
            command.doc["result"].update(interrupted=True, description=result.describe())
            command.record()
        raise CommandInterrupted(f"interrupted: {name} ({command.args[0]}) was stopped", result)
    return result


class _Watch:
    """How the wait for a command ended: by itself, a deadline, silence, a cancel or Ctrl-C."""

    def __init__(self) -> None:
        self.timed_out = False
        self.quiet_for: float | None = None
        self.interrupted = False
        self.cancelled = False
        self.end_time: float | None = None

    def until_done(self, command: StartedCommand, *, deadline: float, quiet_timeout: float | None,
                   cancel: threading.Event | None) -> None:
        while True:
            if not command.alive():
                self.end_time = time.monotonic()
                return
            now = time.monotonic()
            if now >= deadline:
                self.timed_out = True
                return
            if quiet_timeout is not None and command.quiet_for() >= quiet_timeout:
                self.timed_out = True
                self.quiet_for = quiet_timeout
                return
            if cancel is not None and cancel.is_set():
                self.interrupted = self.cancelled = True
                return
            time.sleep(min(_POLL_S, max(deadline - now, 0.001)))


def _finish(command: StartedCommand, watch: _Watch, *, timeout: float, kill_grace: float) -> CommandResult:
    """End the group, drain the logs, and record the result in cmd.json."""
    survivors, signalled = command.end_group(terminate=watch.timed_out or watch.interrupted, grace=kill_grace)
    end_time = watch.end_time if watch.end_time is not None else time.monotonic()
    exit_code = command.finish(survivors)
    paths = command.paths
    result = CommandResult(
        argv=tuple(command.args), returncode=exit_code if exit_code is not None and exit_code >= 0 else None,
        signal=-exit_code if exit_code is not None and exit_code < 0 else None, timed_out=watch.timed_out,
        interrupted=watch.interrupted, duration_s=end_time - command.started, log_dir=command.log_dir,
        stdout_path=paths["stdout"], stderr_path=paths["stderr"], combined_path=paths["combined"],
        started_at=command.started_at, executable=command.executable, pid=command.pid, timeout_s=timeout,
        survivors=tuple(survivors), quiet_s=watch.quiet_for,
        log_lost=tuple(command.sink.lost_bytes.items()), log_error=command.sink.write_error,
    )
    sink = command.sink
    command.doc["result"] = {**result.to_dict(), "group_killed": signalled is not None,
                             "callback_errors": sink.callback_errors,
                             "first_callback_error": sink.first_callback_error,
                             "log_write_errors": sink.write_errors}
    command.record()
    return result


def _finish_group(running, leader: int, pgid: int, *, terminate: bool,
                  grace: float) -> tuple[list[int], str | None]:
    """Make sure nothing of the group lives on. Returns (survivors, the last signal we sent, if any)."""
    live = reap_and_list_live(pgid, leader)
    if not terminate and live == []:
        return [], None
    # Either we must stop it (timeout, Ctrl-C), or the leader exited and left
    # members of its group behind: they die with it. So do descendants that left
    # the group (setsid) while their parent still lives: found through /proc.
    escaped = [p for p in descendants(leader) if (proc_stat(p) or ("", 0, pgid))[2] != pgid]
    for pid in escaped:
        kill_pid(pid, _signal.SIGKILL)
    killpg(pgid, _signal.SIGTERM)
    killpg(pgid, _signal.SIGCONT)      # a stopped process handles SIGTERM only once continued
    if _wait_group_gone(running, leader, pgid, grace) == []:
        reap_escaped(escaped)
        return [], "SIGTERM"
    killpg(pgid, _signal.SIGKILL)
    survivors = list(_wait_group_gone(running, leader, pgid, _AFTER_KILL_WAIT_S) or [])
    reap_escaped(escaped)
    return survivors, "SIGKILL"


def _wait_group_gone(running, leader: int, pgid: int, seconds: float) -> list[int] | None:
    """Poll until the group is gone ([]) or ``seconds`` passed (the pids still alive; None without /proc)."""
    end = time.monotonic() + max(seconds, 0.0)
    while True:
        _poll_leader(running)
        live = reap_and_list_live(pgid, leader)
        if live == []:
            return []
        if time.monotonic() >= end:
            return live
        time.sleep(0.02)


def _poll_leader(running) -> None:
    try:
        running.is_alive()       # reaps the leader once it has exited
    except OSError:
        pass


def _final_status(running, *, alive: bool) -> int | None:
    """The leader's exit code as sh reports it (negative = signal), after draining output."""
    if alive:
        return None              # unkillable (uninterruptible sleep): do not block on it
    try:
        running.wait()           # reaps if needed (the pump drains the output afterwards)
    except ChildProcessError:
        # the status was consumed but not recorded (a Ctrl-C landed inside sh's
        # poll at the wrong instant); the pump still drains the output.
        return getattr(getattr(running, "process", None), "exit_code", None)
    return running.process.exit_code
