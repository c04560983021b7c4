"""Server-path repros: run ``llama-server`` as a repro step and judge what its logs show.

* :mod:`kvdiag.server.lifecycle` -- :class:`ServerProcess` (own session, logs
  streamed, group kill, reaping) and :func:`run_server_attempt`, the engine's
  hook for steps of kind ``server``;
* :mod:`kvdiag.server.client` -- ``/health`` and ``/completion`` over stdlib
  ``http.client``, the requests built from a step's ``vars``;
* :mod:`kvdiag.server.outcome` -- the outcomes (completed, request-failed,
  connection-dropped, server-exited, health-timeout, hang, interrupted) and
  :class:`ServerResult`, which the judge reads like a ``CommandResult``.
"""

from kvdiag.server.client import CompletionRequest, completion_requests
from kvdiag.server.lifecycle import ServerProcess, StopReport, free_port, run_server_attempt
from kvdiag.server.outcome import OUTCOMES, RequestRecord, ServerOutcome, ServerResult

__all__ = [
    "OUTCOMES",
    "CompletionRequest",
    "RequestRecord",
    "ServerOutcome",
    "ServerProcess",
    "ServerResult",
    "StopReport",
    "completion_requests",
    "free_port",
    "run_server_attempt",
]
