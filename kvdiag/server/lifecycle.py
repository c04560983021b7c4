"""Starting, watching and stopping ``llama-server`` for a repro step of kind ``server``.

How a server differs from other commands
----------------------------------------
``run_command`` is run-to-completion: it starts a program, blocks until it exits
or its deadline passes, and only then returns a result. A server never finishes
by itself: kvdiag has to talk to it *while it runs* (poll ``/health``, send the
completions, notice it dying mid-request) and then end it. So the server is
started with the runner's own :func:`~kvdiag.proc.runner.start_command` (same
program lookup, own session and process group, logs streamed line by line to
``<name>.{stdout,stderr,combined}.log``, subreaper and reaping) and ended with
the same group kill; only the talking and the stop protocol live here:

* stopping a server under compute-sanitizer signals the server first and lets
  the launcher write its summary (see :meth:`ServerProcess.stop`);
* ``<name>.cmd.json`` records the command, the port and, at the end, the
  result; each request and its answer go to ``<name>.requests.jsonl``.

The port is chosen free on 127.0.0.1 (bind to port 0, read it, release it) and
passed as ``--host 127.0.0.1 --port N`` *appended* to the argv: llama-server
takes the last value of a repeated option, and appending never touches an
option of a compute-sanitizer in front of the server (which has its own
``--port``). Between the release and the server's bind another program could
take the port; the server then fails to bind and the outcome says
``server-exited`` with its log.

A grandchild that leaves the group (``setsid``) escapes the group kill, as with
``run_command``; neither llama-server nor compute-sanitizer does that.
"""

from __future__ import annotations

import json
import os
import signal as _signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kvdiag.fileio import write_json
from kvdiag.proc.groups import group_members, sigint_deferred
from kvdiag.proc.logfiles import log_paths
from kvdiag.proc.runner import CommandError, CommandInterrupted, StartedCommand, start_command
from kvdiag.registry.entry import Step
from kvdiag.server.client import HOST, CompletionRequest, Reply, completion_requests, get_health, post_completion
from kvdiag.server.outcome import (RequestRecord, ServerOutcome, ServerResult, cuda_error_lines, draft_stats,
                                   exit_text, log_tail)

__all__ = ["ServerProcess", "StopReport", "free_port", "with_address", "run_server_attempt"]

STOP_GRACE_S = 5.0          # SIGTERM → SIGKILL
DEATH_DRAIN_S = 5.0         # the server died mid-request: how long the request may take to notice
EXIT_WAIT_S = 10.0          # a connection dropped: how long the server may take to finish dying (backtraces)
JOIN_S = 5.0                # after the server is stopped, how long a request thread may take to return
HEALTH_POLL_MAX_S = 0.5
HEALTH_REQUEST_TIMEOUT_S = 2.0
_POLL_S = 0.05


# --------------------------------------------------------------------------- ports and argv

def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on right now (bound to port 0, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def with_address(argv: Sequence[str], host: str, port: int) -> tuple[str, ...]:
    """argv with ``--host H --port N`` appended (llama-server: the last value of an option wins)."""
    return (*argv, "--host", host, "--port", str(port))


# --------------------------------------------------------------------------- the process

@dataclass(frozen=True)
class StopReport:
    """How the server ended: by itself, or after kvdiag's SIGTERM or SIGKILL."""

    exited_by_itself: bool
    stopped_with: str | None        # None, "SIGTERM to the target" (launcher ended by itself), "SIGTERM" or "SIGKILL"
    returncode: int | None          # exit status; None when a signal ended it (or it survived)
    signal: int | None
    survivors: tuple[int, ...] = ()

    def describe(self) -> str:
        return exit_text(self.returncode, self.signal)


class ServerProcess:
    """A long-running program started through the runner, its output streamed to the run's logs.

    ``start()`` → ``poll()`` while talking to it → ``stop()`` → ``close()``; as a
    context manager it is stopped and closed on the way out whatever happened.
    """

    def __init__(self, argv: Sequence[str | os.PathLike], *, log_dir: Path, name: str,
                 env_overrides: Mapping[str, str] | None = None, cwd: Path | None = None,
                 on_output: Callable[[str, str], None] | None = None, wrapped: bool = False):
        self.wrapped = wrapped    # a launcher (compute-sanitizer) runs the server as its child
        self.argv = tuple(os.fspath(a) for a in argv)
        if not self.argv:
            raise ValueError("a server needs a non-empty argv")
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"bad log name {name!r}: one plain file-name component is needed")
        self.log_dir = Path(log_dir)
        self.name = name
        self.env_overrides = dict(env_overrides or {})
        self.cwd = cwd
        self.on_output = on_output
        self.executable = ""
        self.started_at = ""
        self.started = 0.0
        self.ended: float | None = None
        self._command: StartedCommand | None = None
        self._stop_report: StopReport | None = None
        self._closed = False

    def start(self) -> "ServerProcess":
        self._command = start_command(self.argv, log_dir=self.log_dir, name=self.name,
                                      env_overrides=self.env_overrides, cwd=self.cwd, on_output=self.on_output,
                                      record={"kind": "server"})
        self.executable = self._command.executable
        self.started_at = self._command.started_at
        self.started = self._command.started
        return self

    @property
    def pid(self) -> int | None:
        return self._command.pid if self._command is not None else None

    @property
    def pgid(self) -> int | None:
        return self.pid           # a new session's leader leads its process group

    @property
    def paths(self) -> dict[str, Path]:
        return log_paths(self.log_dir, self.name)

    def poll(self) -> int | None:
        """The leader's status once it exited (negative: the signal), else None. Reaps nothing: `stop()` does."""
        if self._command is None:
            return None
        code = self._command.status()
        if code is not None and self.ended is None:
            self.ended = time.monotonic()
        return code

    @property
    def alive(self) -> bool:
        return self._command is not None and self.poll() is None

    def stop(self, grace: float = STOP_GRACE_S) -> StopReport:
        """End the whole group (SIGTERM, ``grace`` seconds, SIGKILL), reap, drain the logs. Idempotent."""
        if self._stop_report is not None:
            return self._stop_report
        if self._command is None:
            raise CommandError("the server was never started")
        by_itself = self.poll() is not None
        stopped_with = None
        if self.wrapped and not by_itself and self._stop_target_first(grace):
            stopped_with = "SIGTERM to the target"
        # Running, or its leader died and left members of its group: they go too.
        live, signalled = self._command.end_group(terminate=False, grace=grace)
        stopped_with = signalled or stopped_with
        code = self._command.finish(live)    # when it died by itself first, its own status stands
        self._closed = True
        self.poll()
        returncode = code if code is not None and code >= 0 else None
        sig = -code if code is not None and code < 0 else None
        self._stop_report = StopReport(by_itself, stopped_with, returncode, sig, tuple(live))
        return self._stop_report

    def _stop_target_first(self, grace: float) -> bool:
        """SIGTERM only the launcher's children (the server) and let the launcher end by itself.

        compute-sanitizer writes its summary when its target exits; signalled
        along with the whole group it may die without one, and a report without
        its summary proves nothing. True when the launcher then exited in time.
        """
        members = group_members(self.pgid) or []
        children = [pid for pid, state, ppid in members if ppid == self.pid and state not in ("Z", "X")]
        for pid in children:
            for sig in (_signal.SIGTERM, _signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        end = time.monotonic() + grace
        while time.monotonic() < end:
            if self.poll() is not None:
                return True
            time.sleep(0.02)
        return False

    def log_loss(self) -> dict:
        """``log_lost`` and ``log_error`` of the server's logs (a refused write: see LogSink)."""
        sink = self._command.sink if self._command is not None else None
        if sink is None:
            return {}
        return {"log_lost": tuple(sink.lost_bytes.items()), "log_error": sink.write_error}

    def close(self) -> None:
        """Close the logs (``stop()`` already drained them; this is for a server never stopped)."""
        if self._command is not None and not self._closed:
            self._closed = True
            self._command.sink.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._command is not None:
                self.stop()
        finally:
            self.close()


# --------------------------------------------------------------------------- one attempt

class _Cancelled(Exception):
    """``cancel`` was set by another thread: handled like Ctrl-C."""


@dataclass
class _Phase:
    """The outcome as it stands while the attempt runs."""

    kind: str | None = None
    detail: str = ""
    ready_after_s: float | None = None
    loading_replies: int = 0


# size: the attempt's phases (start, ready, requests, stop) read top to bottom, each a few lines.
def run_server_attempt(step: Step, planned_argv: Sequence[str], env: Mapping[str, str] | None, log_dir: Path,
                       name: str, *, requests: Sequence[CompletionRequest] | None = None,
                       health_timeout: float | None = None, request_timeout: float | None = None,
                       timeout: float | None = None, stop_grace: float = STOP_GRACE_S,
                       on_output: Callable[[str, str], None] | None = None,
                       cancel: threading.Event | None = None,
                       wrapped: bool = False) -> tuple[ServerResult, ServerOutcome]:
    """Start the server, wait for ``/health``, send the requests, stop it; one outcome.

    ``planned_argv`` is the step's rendered argv (a sanitizer may be in front: then
    pass ``wrapped=True`` so that stopping signals the server before its launcher);
    ``env`` is applied on top of the inherited environment. ``requests`` default
    to the step's ``vars`` (:func:`~kvdiag.server.client.completion_requests`).
    Deadlines: ``timeout`` (default ``step.timeout``) bounds the whole attempt;
    ``health_timeout`` and ``request_timeout`` (defaults: ``vars.health_timeout``,
    ``vars.request_timeout``, else the whole budget) bound waiting for readiness
    and for each request's answer, inside that budget.

    Raises :class:`CommandNotFound` before anything starts when the program is
    missing, and :class:`CommandInterrupted` (``.result`` the partial
    :class:`ServerResult`) on Ctrl-C or ``cancel``, after stopping the server.
    A server's failure is an outcome, never an exception.
    """
    plan = tuple(requests) if requests is not None else completion_requests(step.vars)
    if not plan:
        raise ValueError("a server attempt needs at least one request")
    total = float(timeout if timeout is not None else step.timeout)
    if total <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    health_timeout = float(health_timeout if health_timeout is not None else step.vars.get("health_timeout", total))
    request_timeout = float(request_timeout if request_timeout is not None
                            else step.vars.get("request_timeout", total))
    port = free_port()
    argv = with_address(planned_argv, HOST, port)
    server = ServerProcess(argv, log_dir=log_dir, name=name, env_overrides=env, on_output=on_output,
                           wrapped=wrapped)
    server.start()
    log_dir = Path(log_dir)
    cmd_json = log_dir / f"{name}.cmd.json"
    doc: dict[str, Any] = {
        "name": name, "kind": "server", "argv": list(argv), "executable": server.executable,
        "env_overrides": dict(env or {}), "started_at": server.started_at, "pid": server.pid, "port": port,
        "timeout_s": total, "health_timeout_s": health_timeout, "request_timeout_s": request_timeout,
        "stop_grace_s": stop_grace, "requests": [r.body() for r in plan],
        "logs": {k: p.name for k, p in server.paths.items()} | {"requests": f"{name}.requests.jsonl"},
        "result": None,
    }
    deadline = server.started + total
    phase = _Phase()
    records: list[RequestRecord] = []
    waiting: list[threading.Thread] = []
    interrupted = False
    try:
        _write_json(cmd_json, doc)
        with open(log_dir / f"{name}.requests.jsonl", "w", encoding="utf-8") as journal:
            _wait_ready(server, port, phase, min(server.started + health_timeout, deadline), cancel)
            if phase.kind is None:
                _send_all(server, port, plan, records, phase, journal, waiting, request_timeout, deadline, cancel)
    except (KeyboardInterrupt, _Cancelled):
        interrupted = True
    finally:
        # Whatever happened (even a bug of ours), nothing of the server outlives the attempt.
        with sigint_deferred() as extra_sigints:
            stop = server.stop(stop_grace)
            for thread in waiting:               # the server's sockets are closed now: they return
                thread.join(JOIN_S)
            server.close()
            if extra_sigints:
                interrupted = True
    if interrupted:
        phase.kind, phase.detail = "interrupted", "interrupted by the user"
    combined = server.paths["combined"].read_bytes().decode("utf-8", errors="replace")
    outcome = ServerOutcome(
        kind=phase.kind or "completed", detail=phase.detail, port=port, requests=tuple(records),
        requests_planned=len(plan), ready_after_s=phase.ready_after_s, loading_replies=phase.loading_replies,
        exited_by_itself=stop.exited_by_itself, returncode=stop.returncode, signal=stop.signal,
        stopped_with=stop.stopped_with, survivors=stop.survivors, last_lines=log_tail(combined),
        cuda_errors=cuda_error_lines(combined))
    paths = server.paths
    result = ServerResult(
        argv=argv, returncode=stop.returncode, signal=stop.signal,
        duration_s=(server.ended or time.monotonic()) - server.started, log_dir=log_dir,
        stdout_path=paths["stdout"], stderr_path=paths["stderr"], combined_path=paths["combined"],
        started_at=server.started_at, server=outcome, executable=server.executable, pid=server.pid,
        timeout_s=total, survivors=stop.survivors, **server.log_loss())
    doc["result"] = result.to_dict()
    _write_json(cmd_json, doc)
    if interrupted:
        raise CommandInterrupted(f"interrupted: {name} ({argv[0]}) was stopped", result)
    return result, outcome


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise _Cancelled()


def _wait_ready(server: ServerProcess, port: int, phase: _Phase, deadline: float,
                cancel: threading.Event | None) -> None:
    """Poll ``/health`` until 200; a 503 ("Loading model") means keep waiting."""
    interval, last = 0.05, "no answer yet"
    while True:
        _check_cancel(cancel)
        if server.poll() is not None:
            phase.kind = "server-exited"
            phase.detail = (f"the server exited before it was ready (last /health: {last}; "
                            f"{phase.loading_replies} loading answer(s))")
            return
        now = time.monotonic()
        if now >= deadline:
            phase.kind = "health-timeout"
            phase.detail = (f"/health did not answer 200 within {deadline - server.started:.1f} s "
                            f"(last: {last}; {phase.loading_replies} loading answer(s))")
            return
        reply = get_health(port, timeout=min(HEALTH_REQUEST_TIMEOUT_S, deadline - now))
        if reply.status == 200:
            phase.ready_after_s = time.monotonic() - server.started
            return
        if reply.status == 503:
            phase.loading_replies += 1
            last = f"503 {reply.error_message()}"
        elif reply.status is not None:
            last = f"HTTP {reply.status} {reply.error_message()}"
        else:
            last = f"{reply.error_kind} ({reply.error})"
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
        interval = min(interval * 1.5, HEALTH_POLL_MAX_S)


def _send_all(server: ServerProcess, port: int, plan: Sequence[CompletionRequest], records: list[RequestRecord],
              phase: _Phase, journal, waiting: list[threading.Thread], request_timeout: float, deadline: float,
              cancel: threading.Event | None) -> None:
    for index, completion in enumerate(plan, 1):
        label = f"request {index}/{len(plan)}"
        if server.poll() is not None:
            phase.kind, phase.detail = "server-exited", f"the server exited by itself before {label}"
            return
        record = _exchange(server, port, completion, index, label,
                           min(time.monotonic() + request_timeout, deadline), waiting, journal, cancel)
        records.append(record)
        if record.outcome != "completed":
            phase.kind, phase.detail = record.outcome, record.error or record.outcome
            return
    if server.poll() is not None:
        phase.kind = "server-exited"
        phase.detail = f"the server exited by itself after answering {len(plan)} request(s)"


def _exchange(server: ServerProcess, port: int, completion: CompletionRequest, index: int, label: str,
              deadline: float, waiting: list[threading.Thread], journal, cancel: threading.Event | None
              ) -> RequestRecord:
    """One request, sent from a thread while this one watches the server and the clock."""
    box: dict[str, Reply] = {}
    budget = max(deadline - time.monotonic(), 0.001)

    def send() -> None:
        try:
            # the socket timeout is only a backstop: the watcher below decides about hangs
            box["reply"] = post_completion(port, completion, timeout=budget + 5.0)
        except BaseException as exc:  # noqa: BLE001 - the thread must never die with an exception
            box["reply"] = Reply(None, error_kind="dropped", error=f"{type(exc).__name__}: {exc}")

    started = time.monotonic()
    thread = threading.Thread(target=send, daemon=True, name=f"kvdiag-server-request-{index}")
    thread.start()
    died_at: float | None = None
    while thread.is_alive():
        _check_cancel(cancel)
        now = time.monotonic()
        if died_at is None and server.poll() is not None:
            died_at = now
        if died_at is not None and now - died_at >= DEATH_DRAIN_S:
            break
        if now >= deadline:
            break
        thread.join(_POLL_S)
    if thread.is_alive():
        waiting.append(thread)
    reply = box.get("reply")
    elapsed = time.monotonic() - started
    record = _classify(server, reply, index, label, elapsed, budget, died_at is not None)
    journal.write(json.dumps({"index": index, "request": completion.body(), "record": record.to_dict(),
                              "body": _body_excerpt(reply)}) + "\n")
    journal.flush()
    return record


def _classify(server: ServerProcess, reply: Reply | None, index: int, label: str, elapsed: float, budget: float,
              died: bool) -> RequestRecord:
    if reply is None:
        if died:
            return RequestRecord(index, "connection-dropped", elapsed,
                                 error=f"the server died during {label}")
        return RequestRecord(index, "hang", elapsed, error=f"{label} got no answer within {budget:.1f} s")
    if reply.status == 200:
        return _completed(reply, index, label, elapsed)
    if reply.status is not None:
        return RequestRecord(index, "request-failed", elapsed, status=reply.status,
                             error=f"{label} failed: HTTP {reply.status} ({reply.error_message()})")
    # No answer: did the server die (ggml's abort may take seconds to print its backtrace)?
    exited = _wait_exit(server, EXIT_WAIT_S) if reply.error_kind != "timeout" else server.poll() is not None
    if exited:
        kind = "server-exited" if reply.error_kind == "refused" else "connection-dropped"
        text = (f"the server exited by itself before {label}" if kind == "server-exited"
                else f"the server died during {label}")
        return RequestRecord(index, kind, elapsed, error=f"{text} ({reply.error})")
    if reply.error_kind == "timeout":
        return RequestRecord(index, "hang", elapsed, error=f"{label} got no answer within {budget:.1f} s")
    return RequestRecord(index, "request-failed", elapsed,
                         error=f"{label} failed: the connection closed without an answer while the server "
                               f"kept running ({reply.error})")


def _completed(reply: Reply, index: int, label: str, elapsed: float) -> RequestRecord:
    try:
        doc = reply.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return RequestRecord(index, "request-failed", elapsed, status=200,
                             error=f"{label} failed: HTTP 200 but the answer is not a JSON object")
    timings = doc.get("timings") if isinstance(doc.get("timings"), dict) else {}
    content = doc.get("content")
    return RequestRecord(
        index, "completed", elapsed, status=200,
        tokens_predicted=_int_or_none(doc.get("tokens_predicted")),
        tokens_evaluated=_int_or_none(doc.get("tokens_evaluated")),
        stop_type=doc.get("stop_type") if isinstance(doc.get("stop_type"), str) else None,
        content_chars=len(content) if isinstance(content, str) else None,
        timings={k: v for k, v in timings.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        draft=draft_stats(doc))


def _wait_exit(server: ServerProcess, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while server.poll() is None:
        if time.monotonic() >= end:
            return False
        time.sleep(_POLL_S)
    return True


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _body_excerpt(reply: Reply | None, limit: int = 65536) -> dict[str, Any] | None:
    if reply is None:
        return None
    text = reply.body[:limit].decode("utf-8", errors="replace")
    return {"status": reply.status, "error_kind": reply.error_kind, "error": reply.error,
            "elapsed_s": round(reply.elapsed_s, 3), "text": text, "truncated": len(reply.body) > limit}


def _write_json(path: Path, doc: dict) -> None:
    write_json(path, doc)
