"""The one function every external command of kvdiag goes through: :func:`run_command`.

Backend: the ``sh`` package (2.x). ``sh.Command(path)(..., _bg=True, _new_session=True)``
forks the child into its own session (so its own process group), reads stdout and
stderr in ONE background thread (so the combined log keeps the arrival order of
lines), gives stdout a pseudo-terminal in raw mode when ``tty=True`` (stderr stays a
pipe) and reaps the child it started. kvdiag does the rest itself, because ``sh``
does not:

* the deadline: we poll ``RunningCommand.is_alive()`` (sh's ``_timeout`` signals
  only the child itself, not its group) and, on timeout or Ctrl-C, send SIGTERM to
  the whole group with ``os.killpg``, then SIGKILL after ``kill_grace``;
* grandchildren: the group is scanned through ``/proc`` until no live member is
  left. Orphaned grandchildren are reparented to init, and not every init reaps
  them (this machine's pid 1 does not), so the kvdiag process makes itself a
  *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux) the first time
  it runs a command and reaps the orphans of each command's group itself, by
  pid, never with ``waitpid(-1)`` (which would steal sh's statuses);
* the logs: our stdout/stderr callbacks write each line, as raw bytes, to the
  per-stream log and to the combined log straight away (unbuffered files), and
  ``<name>.cmd.json`` is written before the start and rewritten at the end;
* Ctrl-C: the KeyboardInterrupt lands in our polling loop in the main thread; we
  kill the group, let sh reap and drain, write the logs, then raise
  :class:`CommandInterrupted` carrying the partial result.

* a failed exec: sh raises ``ForkException`` but never reaps that child (a zombie
  per failed run); the child reports its pid through a pipe from
  ``_preexec_fn`` and we reap it, then raise :class:`CommandNotFound`;
* ``sh``'s ``wait(timeout=)`` does not join its reader threads; we poll
  ``is_alive()`` ourselves and call ``wait()`` only once the group is dead, which
  reaps and drains every byte before the logs are closed.

Verified on this machine with the scenario programs in ``tests/scenarios``: the pty
line endings (sh sets the pty raw, and we normalise ``\\r\\n`` anyway), zombie
reaping, SIGINT handling, a few MB of output with nothing lost, a line printed
before SIGABRT kept under ``tty=True`` (the same suite passes on the GPU machine's
Python 3.12 with the real compute-sanitizer). Caveats of this backend: ``sh`` forks from
Python (``os.fork``), so on Python >= 3.12 a run started while other threads are
alive gets a fork-with-threads DeprecationWarning; and ``on_output`` is called in
sh's reader thread, so a slow callback slows reading.

A grandchild that leaves the group (``setsid``) escapes the group kill; nothing
in ggml's tests or compute-sanitizer does that.
"""

from __future__ import annotations

import functools
import json
import os
import signal as _signal
import threading
import warnings
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Sequence

import sh

# sh forks from Python; on Python >= 3.12 a fork while other threads run (scan
# workers, target inspections) warns. The child only resets signals and execs,
# which is the fork-then-exec pattern the warning exempts in spirit.
warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded, use of fork\(\) may lead to deadlocks",
                        category=DeprecationWarning)

from kvdiag.errors import KvdiagError
from kvdiag.proc.groups import become_subreaper, killpg, reap_and_list_live, sigint_deferred
from kvdiag.proc.logfiles import LogTexts, log_paths

# size: the runner, its log sink and the group's end; the sink is shared with the server (#18.4).
__all__ = [
    "CommandError",
    "CommandNotFound",
    "CommandInterrupted",
    "CommandResult",
    "run_command",
    "resolve_program",
]

_POLL_S = 0.05          # how often we look at the child while it runs
_AFTER_KILL_WAIT_S = 10.0   # how long we wait for the group after SIGKILL (D-state GPU processes)


class CommandError(KvdiagError):
    """A command could not be run as asked (base of the runner's errors)."""


class CommandNotFound(CommandError):
    """The program does not exist, is not a file, or cannot be executed. Nothing was started."""


class CommandInterrupted(CommandError):
    """Ctrl-C while a command ran. The group was killed and the logs written; ``.result`` is partial."""

    def __init__(self, message: str, result: "CommandResult"):
        super().__init__(message)
        self.result = result


def _signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class CommandResult(LogTexts):
    """What happened to one command. Its output is in the log files, not in memory."""

    argv: tuple[str, ...]
    returncode: int | None      # exit status when it exited normally; None when killed by a signal
    signal: int | None          # signal number that ended it (ours on timeout/interrupt, or its own)
    timed_out: bool
    interrupted: bool           # Ctrl-C in kvdiag
    duration_s: float
    log_dir: Path
    stdout_path: Path
    stderr_path: Path
    combined_path: Path
    started_at: str             # ISO-8601 UTC
    executable: str = ""        # argv[0] as resolved and executed
    pid: int | None = None
    timeout_s: float | None = None
    survivors: tuple[int, ...] = field(default=())   # pids of the group still alive after SIGKILL (D state)
    quiet_s: float | None = None   # the quiet_timeout, when that is what stopped it

    @property
    def ok(self) -> bool:
        """Exited with status 0 by itself (not after our timeout kill or Ctrl-C)."""
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    def describe(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.timed_out:
            if self.quiet_s is not None:
                return (f"timed out: no output for {self.quiet_s:.1f} s, {self.duration_s:.1f} s in all "
                        "(process group killed)")
            t = self.timeout_s if self.timeout_s is not None else self.duration_s
            return f"timed out after {t:.1f} s (process group killed)"
        if self.signal is not None:
            return f"killed by {_signal_name(self.signal)} ({self.signal})"
        if self.returncode is not None:
            return f"exit {self.returncode}"
        return "ended with an unknown status"

    def to_dict(self) -> dict:
        return result_dict(self)


def result_dict(result) -> dict:
    """A process result as JSON data, paths relative to the run directory (shared by the
    runner's CommandResult and the server executor's ServerResult)."""
    base = result.log_dir.parent
    return {
        "argv": list(result.argv),
        "executable": result.executable,
        "pid": result.pid,
        "returncode": result.returncode,
        "signal": result.signal,
        "signal_name": _signal_name(result.signal) if result.signal is not None else None,
        "timed_out": result.timed_out,
        "interrupted": result.interrupted,
        "timeout_s": result.timeout_s,
        "duration_s": round(result.duration_s, 3),
        "started_at": result.started_at,
        "ok": result.ok,
        "description": result.describe(),
        "survivors": list(result.survivors),
        "log_dir": _rel(result.log_dir, base),
        "stdout_path": _rel(result.stdout_path, base),
        "stderr_path": _rel(result.stderr_path, base),
        "combined_path": _rel(result.combined_path, base),
    }


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
















class _LogSink:
    """Receives chunks from sh's reader thread and writes lines to the three logs."""

    def __init__(self, log_dir: Path, name: str, tty: bool,
                 on_output: Callable[[str, str], None] | None):
        self.paths = log_paths(log_dir, name)
        # buffering=0: every write is a write(2); a kill of kvdiag loses nothing written.
        self.files = {k: open(p, "wb", buffering=0) for k, p in self.paths.items()}
        self.partial = {"stdout": b"", "stderr": b""}
        self.crlf = {"stdout": tty, "stderr": False}
        self.on_output = on_output
        self.callback_errors = 0
        self.first_callback_error: str | None = None
        self.write_errors = 0
        self.lock = threading.Lock()
        self.closed = False
        self.last_output = time.monotonic()   # when the last chunk arrived (quiet_timeout)

    def callback(self, stream: str) -> Callable[[object], None]:
        def cb(chunk):  # one argument: sh passes the chunk only
            try:
                raw = chunk if isinstance(chunk, bytes) else chunk.encode("utf-8")
                self.feed(stream, raw)
            except Exception:  # never kill sh's reader thread
                self.write_errors += 1
            return None
        return cb

    def feed(self, stream: str, data: bytes) -> None:
        self.last_output = time.monotonic()
        with self.lock:
            if self.closed:
                return
            buf = self.partial[stream] + data
            lines = buf.split(b"\n")
            self.partial[stream] = lines.pop()
            for line in lines:
                self._emit(stream, line, b"\n")

    def _emit(self, stream: str, line: bytes, end: bytes) -> None:
        if self.crlf[stream] and line.endswith(b"\r"):
            line = line[:-1]
        data = line + end
        self.files[stream].write(data)
        self.files["combined"].write(data)
        if self.on_output is not None:
            try:
                self.on_output(stream, line.decode("utf-8", errors="replace"))
            except Exception as exc:  # a broken progress display must not end the run
                self.callback_errors += 1
                if self.first_callback_error is None:
                    self.first_callback_error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            for stream in ("stdout", "stderr"):
                rest = self.partial[stream]
                self.partial[stream] = b""
                if rest:
                    if self.crlf[stream] and rest.endswith(b"\r"):
                        rest = rest[:-1]
                    try:
                        self._emit(stream, rest, b"")
                    except OSError:
                        self.write_errors += 1
            self.closed = True
            for f in self.files.values():
                try:
                    f.close()
                except OSError:
                    pass


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the runner

# size: start, watch and finish share the child's state; being split into those parts (#18.4).
def run_command(argv: Sequence[str | os.PathLike], *, timeout: float, log_dir: Path, name: str,
                env: Mapping[str, str] | None = None, env_overrides: Mapping[str, str] | None = None,
                cwd: Path | None = None, tty: bool = False,
                on_output: Callable[[str, str], None] | None = None,
                kill_grace: float = 3.0, cancel: threading.Event | None = None,
                quiet_timeout: float | None = None) -> CommandResult:
    """Run ``argv`` (a list, never a shell string) in its own session and process group.

    Output goes, as it arrives, to ``log_dir/<name>.{stdout,stderr,combined}.log``;
    ``log_dir/<name>.cmd.json`` records the command and, at the end, its result.
    On ``timeout`` (seconds) or Ctrl-C the whole group gets SIGTERM, then SIGKILL
    after ``kill_grace``. ``env`` replaces the inherited environment (default:
    ``os.environ``); ``env_overrides`` is applied on top and recorded. ``tty=True``
    gives stdout a pseudo-terminal so C stdio line-buffers. ``on_output(stream,
    line)`` is called per complete line (without its newline) from a reader thread;
    its exceptions are counted in cmd.json, never raised.

    ``quiet_timeout``: the command also times out when it printed nothing for that many
    seconds (a scan batch of many cases: each case may take as long as it would alone,
    and one that hangs does not cost the whole batch's allowance).

    ``cancel``: another thread (a scan's Ctrl-C handler) sets it to stop this command;
    the group is killed as on Ctrl-C and the result, marked interrupted, is
    returned (not raised: the caller asked for it).

    Raises :class:`CommandNotFound` before starting anything when the program is
    missing or not executable, and :class:`CommandInterrupted` (with ``.result``)
    after Ctrl-C. A program's failure is a result, never an exception.
    """
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ValueError("run_command needs a non-empty argv")
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad log name {name!r}: one plain file-name component is needed")
    if timeout is None or timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    if cwd is not None and not Path(cwd).is_dir():
        raise CommandError(f"working directory does not exist: {cwd}")

    child_env = _effective_env(env, env_overrides)
    executable = resolve_program(args[0], path_env=child_env.get("PATH", os.defpath), cwd=cwd)

    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    cmd_json = log_dir / f"{name}.cmd.json"
    sink = _LogSink(log_dir, name, tty, on_output)
    become_subreaper()

    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    doc: dict = {
        "name": name,
        "argv": args,
        "executable": executable,
        "cwd": str(cwd) if cwd is not None else None,
        "env_overrides": dict(env_overrides or {}),
        "env_replaced": env is not None,
        "tty": tty,
        "timeout_s": timeout,
        "kill_grace_s": kill_grace,
        "started_at": started_at,
        "pid": None,
        "logs": {k: p.name for k, p in sink.paths.items()},
        "result": None,
    }
    _write_json(cmd_json, doc)

    devnull = open(os.devnull, "rb")
    pid_r, pid_w = os.pipe()
    t0 = time.monotonic()
    try:
        running = sh.Command(executable)(
            *args[1:],
            _bg=True, _bg_exc=False, _new_session=True,
            _in=devnull,
            _out=sink.callback("stdout"), _err=sink.callback("stderr"),
            _out_bufsize=1, _err_bufsize=1,
            _tty_out=tty, _env=child_env, _cwd=str(cwd) if cwd is not None else None,
            _ok_code=list(range(-128, 256)),   # every status is a result, not an exception
            _encoding="utf-8", _decode_errors="strict",  # undecodable chunks arrive as bytes
            _no_out=True, _no_err=True, _no_pipe=True,
            _preexec_fn=functools.partial(_child_setup, pid_w),
        )
    except sh.ForkException as exc:
        os.close(pid_w)
        failed = _read_child_pid(pid_r)
        if failed is not None:
            try:
                os.waitpid(failed, 0)      # sh leaves the failed child unreaped
            except ChildProcessError:
                pass
        sink.close()
        devnull.close()
        last = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = last[-1].strip() if last else "exec failed"
        doc["result"] = {"error": f"cannot execute: {reason}"}
        _write_json(cmd_json, doc)
        raise CommandNotFound(f"cannot execute {args[0]}: {reason}") from None
    except BaseException:
        os.close(pid_w)
        os.close(pid_r)
        sink.close()
        devnull.close()
        raise
    os.close(pid_w)
    os.close(pid_r)
    devnull.close()

    pid = running.pid
    pgid = running.pgid
    timed_out = False
    quiet_for: float | None = None
    interrupted = False
    end_time: float | None = None
    deadline = t0 + timeout
    cancelled = False
    try:
        doc["pid"] = pid
        _write_json(cmd_json, doc)
        while True:
            if not running.is_alive():
                end_time = time.monotonic()
                break
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if quiet_timeout is not None and now - sink.last_output >= quiet_timeout:
                timed_out = True
                quiet_for = quiet_timeout
                break
            if cancel is not None and cancel.is_set():
                interrupted = cancelled = True
                break
            time.sleep(min(_POLL_S, max(deadline - now, 0.001)))
    except KeyboardInterrupt:
        interrupted = True

    with sigint_deferred() as extra_sigints:
        survivors, killed_group = _finish_group(running, pid, pgid,
                                                terminate=timed_out or interrupted,
                                                grace=kill_grace)
        if end_time is None:
            end_time = time.monotonic()
        exit_code = _final_status(running, alive=bool(survivors and pid in survivors))
        sink.close()

        returncode: int | None = None
        sig: int | None = None
        if exit_code is not None:
            if exit_code < 0:
                sig = -exit_code
            else:
                returncode = exit_code
        result = CommandResult(
            argv=tuple(args), returncode=returncode, signal=sig, timed_out=timed_out,
            interrupted=interrupted, duration_s=end_time - t0, log_dir=log_dir,
            stdout_path=sink.paths["stdout"], stderr_path=sink.paths["stderr"],
            combined_path=sink.paths["combined"], started_at=started_at,
            executable=executable, pid=pid, timeout_s=timeout, survivors=tuple(survivors),
            quiet_s=quiet_for,
        )
        res = result.to_dict()
        res.update({
            "group_killed": killed_group,
            "callback_errors": sink.callback_errors,
            "first_callback_error": sink.first_callback_error,
            "log_write_errors": sink.write_errors,
        })
        doc["result"] = res
        _write_json(cmd_json, doc)
        if extra_sigints:
            interrupted = True

    if cancelled and not extra_sigints:
        return result
    if interrupted:
        if not result.interrupted:  # Ctrl-C arrived during the cleanup only
            result = _replace_interrupted(result)
            doc["result"]["interrupted"] = True
            doc["result"]["description"] = result.describe()
            _write_json(cmd_json, doc)
        raise CommandInterrupted(f"interrupted: {name} ({args[0]}) was stopped", result)
    return result


def _replace_interrupted(result: CommandResult) -> CommandResult:
    from dataclasses import replace
    return replace(result, interrupted=True)


def _finish_group(running, leader: int, pgid: int, *, terminate: bool,
                  grace: float) -> tuple[list[int], bool]:
    """Make sure nothing of the group lives on. Returns (survivors, whether we signalled it)."""
    live = reap_and_list_live(pgid, leader)
    if not terminate and live == []:
        return [], False
    # Either we must stop it (timeout, Ctrl-C), or the leader exited and left
    # members of its group behind: they die with it.
    killpg(pgid, _signal.SIGTERM)
    killpg(pgid, _signal.SIGCONT)      # a stopped process handles SIGTERM only once continued
    end = time.monotonic() + max(grace, 0.0)
    while True:
        _poll_leader(running)
        live = reap_and_list_live(pgid, leader)
        if live == []:
            return [], True
        if time.monotonic() >= end:
            break
        time.sleep(0.02)
    killpg(pgid, _signal.SIGKILL)
    end = time.monotonic() + _AFTER_KILL_WAIT_S
    while True:
        _poll_leader(running)
        live = reap_and_list_live(pgid, leader)
        if live == []:
            return [], True
        if time.monotonic() >= end:
            return list(live or []), True
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
        running.wait()           # reaps if needed; joins sh's reader threads (all output is in)
    except ChildProcessError:
        # the status was consumed but not recorded (a Ctrl-C landed inside sh's
        # poll at the wrong instant): the logs are still complete enough.
        thread = getattr(getattr(running, "process", None), "_output_thread", None)
        if thread is not None:
            thread.join(timeout=3.0)
        return getattr(getattr(running, "process", None), "exit_code", None)
    return running.process.exit_code
