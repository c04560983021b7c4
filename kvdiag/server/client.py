"""The HTTP side of a server repro: ``GET /health`` and ``POST /completion``, stdlib only.

Every call opens one connection to 127.0.0.1 with a socket timeout, sends one
request, reads one bounded response and closes. Failures are values (a
:class:`Reply` with ``error_kind`` set), never exceptions, because how a
request failed *is* the observation: a refused connection while the server
loads, a connection dropped because the server died, a timeout because it hung.

The request body is what the seed's server arms sent: greedy
(``temperature = 0``), a fixed ``seed``, ``cache_prompt = false`` so every run
decodes the whole prompt again, and ``n_predict`` tokens (900 in the seed).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from kvdiag.fileio import parse_json

HOST = "127.0.0.1"
MAX_BODY_BYTES = 16 << 20       # a 900-token completion is a few KB; anything near this is not llama-server
DEFAULT_PROMPT = "Write a long, detailed story about a lighthouse keeper and the sea."
DEFAULT_N_PREDICT = 128
DEFAULT_SEED = 1234

# Keys of a step's ``vars`` passed through into the request body when present.
PASSTHROUGH = ("ignore_eos", "top_k", "top_p", "min_p", "n_probs", "id_slot")


@dataclass(frozen=True)
class CompletionRequest:
    """One ``POST /completion`` of a server step."""

    prompt: str = DEFAULT_PROMPT
    n_predict: int = DEFAULT_N_PREDICT
    seed: int = DEFAULT_SEED
    temperature: float = 0.0
    cache_prompt: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"prompt": self.prompt, "n_predict": self.n_predict, "temperature": self.temperature,
                               "seed": self.seed, "cache_prompt": self.cache_prompt}
        doc.update(self.extra)
        return doc


def completion_requests(params: Mapping[str, Any]) -> tuple[CompletionRequest, ...]:
    """The requests a server step sends, from its ``vars`` (and any run overrides merged in).

    ``prompt``, ``n_predict``, ``seed``, ``temperature`` and ``requests`` (how many
    completions one server start answers, in sequence; default 1) are read; the
    keys of :data:`PASSTHROUGH` (``ignore_eos``…) go into the body unchanged.
    """
    count = int(params.get("requests", 1))
    if count < 1:
        raise ValueError(f"requests must be at least 1, not {count}")
    request = CompletionRequest(
        prompt=str(params.get("prompt", DEFAULT_PROMPT)),
        n_predict=int(params.get("n_predict", DEFAULT_N_PREDICT)),
        seed=int(params.get("seed", DEFAULT_SEED)),
        temperature=float(params.get("temperature", 0.0)),
        extra={k: params[k] for k in PASSTHROUGH if k in params},
    )
    return (request,) * count


@dataclass(frozen=True)
class Reply:
    """What one HTTP exchange gave: a status and body, or how it failed.

    ``error_kind``: ``refused`` (nothing listens), ``timeout`` (no answer within
    the socket timeout), ``dropped`` (the connection closed or broke before a
    whole response arrived), ``None`` when a response was read.
    """

    status: int | None
    body: bytes = b""
    error_kind: str | None = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def answered(self) -> bool:
        return self.status is not None

    def json(self) -> Any:
        """The body as JSON; raises ValueError when it is not."""
        return parse_json(self.body.decode("utf-8", errors="strict"))

    def error_message(self) -> str:
        """llama-server's ``{"error": {"message": …}}``, else the start of the body."""
        try:
            doc = self.json()
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict) and doc["error"].get("message"):
            return str(doc["error"]["message"])
        text = self.body.decode("utf-8", errors="replace").strip()
        return text[:200] if text else "(empty body)"


def request(method: str, path: str, port: int, *, timeout: float, body: Any = None,
            host: str = HOST) -> Reply:
    """One request; never raises for network trouble (see :class:`Reply`)."""
    if timeout <= 0:
        return Reply(None, error_kind="timeout", error="no time left for the request")
    payload = None if body is None else json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_BODY_BYTES + 1)
        if len(data) > MAX_BODY_BYTES:
            return Reply(response.status, data[:MAX_BODY_BYTES], "dropped",
                         f"response larger than {MAX_BODY_BYTES} bytes", time.monotonic() - started)
        return Reply(response.status, data, elapsed_s=time.monotonic() - started)
    except ConnectionRefusedError as exc:
        return Reply(None, error_kind="refused", error=_describe(exc), elapsed_s=time.monotonic() - started)
    except (socket.timeout, TimeoutError) as exc:
        return Reply(None, error_kind="timeout", error=_describe(exc), elapsed_s=time.monotonic() - started)
    except (http.client.HTTPException, OSError) as exc:
        # RemoteDisconnected, IncompleteRead, ConnectionResetError, BrokenPipeError…
        return Reply(None, error_kind="dropped", error=_describe(exc), elapsed_s=time.monotonic() - started)
    finally:
        conn.close()


def get_health(port: int, *, timeout: float, host: str = HOST) -> Reply:
    return request("GET", "/health", port, timeout=timeout, host=host)


def post_completion(port: int, completion: CompletionRequest, *, timeout: float, host: str = HOST) -> Reply:
    return request("POST", "/completion", port, timeout=timeout, body=completion.body(), host=host)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
