"""What every stand-in llama-server shares: its argv, a bounded life, and a tiny HTTP server.

A stand-in is started the way kvdiag starts llama-server: whatever argv the step
has, then ``--host 127.0.0.1 --port N`` appended. It ignores llama-server's own
options, refuses any host but 127.0.0.1, and ends itself after ``--lifetime``
seconds (default 60) whatever happens, so a test that goes wrong cannot leave it
running. ``--grandchild`` forks a sleeping grandchild first (same process group,
same stdout/stderr) and prints ``grandchild <pid>``; every stand-in prints
``standin pid <pid>`` and, for each completion, ``standin got <json body>`` on
stderr.

Answers are shaped like llama-server's: ``/health`` is ``{"status": "ok"}`` or a
503 ``Loading model`` error; ``/completion`` has ``content``, ``tokens_predicted``,
``stop_type`` and a ``timings`` object.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
import time
from typing import Any, Callable

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}

# ggml's block for a CUDA error, then its abort line (paths as a build would print them).
CUDA_ILLEGAL_ACCESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "  current device: 0, in function ggml_backend_cuda_synchronize at ggml/src/ggml-cuda/ggml-cuda.cu:2660\n"
    "  cudaStreamSynchronize(cuda_ctx->stream())\n"
    "ggml/src/ggml-cuda/ggml-cuda.cu:94: CUDA error\n"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--lifetime", type=float, default=60.0)
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--state", default=None)
    parser.add_argument("--load-seconds", type=float, default=0.0)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.host != "127.0.0.1" or not args.port:
        print(f"standin: refusing host={args.host!r} port={args.port!r}: only 127.0.0.1 and a port",
              file=sys.stderr, flush=True)
        sys.exit(2)
    return args


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def start(args: argparse.Namespace) -> None:
    """The bounded life, the pid line and the optional grandchild."""
    timer = threading.Timer(args.lifetime, os._exit, (3,))
    timer.daemon = True
    timer.start()
    print(f"standin pid {os.getpid()}", flush=True)
    if args.grandchild:
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + args.lifetime
            while time.monotonic() < end:
                time.sleep(0.2)
            os._exit(0)
        print(f"grandchild {pid}", flush=True)


def completion_doc(body: dict[str, Any], **extra_timings: Any) -> dict[str, Any]:
    n = int(body.get("n_predict", 16))
    prompt = str(body.get("prompt", ""))
    timings = {"cache_n": 0, "prompt_n": len(prompt.split()), "prompt_ms": 12.5, "prompt_per_token_ms": 1.25,
               "prompt_per_second": 800.0, "predicted_n": n, "predicted_ms": 50.0 * n / 10,
               "predicted_per_token_ms": 5.0, "predicted_per_second": 200.0, **extra_timings}
    return {"index": 0, "content": "tok " * n, "tokens": [], "id_slot": 0, "stop": True, "model": "standin",
            "tokens_predicted": n, "tokens_evaluated": len(prompt.split()), "prompt": prompt,
            "stop_type": "limit", "stopping_word": "", "tokens_cached": 0, "timings": timings}


Route = Callable[["Handler", dict[str, Any]], None]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    health: Callable[[], tuple[int, dict[str, Any]]] = staticmethod(lambda: (200, {"status": "ok"}))
    completion: Route = staticmethod(lambda handler, body: handler.send_json(200, completion_doc(body)))

    def send_json(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            status, doc = type(self).health()
            self.send_json(status, doc)
        else:
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/completion":
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found"}})
            return
        log(f"standin got {json.dumps(body, sort_keys=True)}")
        type(self).completion(self, body)

    def log_message(self, fmt: str, *args: Any) -> None:
        log("srv  log_server_r: " + fmt % args)


def serve(args: argparse.Namespace, *, health=None, completion: Route | None = None) -> None:
    """Listen on 127.0.0.1:port and answer until killed (or the lifetime ends)."""
    attrs: dict[str, Any] = {}
    if health is not None:
        attrs["health"] = staticmethod(health)
    if completion is not None:
        attrs["completion"] = staticmethod(completion)
    handler = type("StandinHandler", (Handler,), attrs)
    server = http.server.HTTPServer((args.host, args.port), handler)
    log(f"main: server is listening on http://{args.host}:{args.port}")
    server.serve_forever(poll_interval=0.1)


def loading_for(seconds: float) -> Callable[[], tuple[int, dict[str, Any]]]:
    """A /health that answers 503 Loading model for ``seconds``, then 200."""
    ready_at = time.monotonic() + seconds

    def health() -> tuple[int, dict[str, Any]]:
        if time.monotonic() < ready_at:
            return 503, LOADING
        return 200, {"status": "ok"}
    return health


def crash(handler: Handler, body: dict[str, Any]) -> None:
    """Decode a little, then die the way ggml dies on a CUDA error (SIGABRT)."""
    log("slot update_slots: id  0 | task 0 | prompt done, n_tokens = 16")
    sys.stderr.write(CUDA_ILLEGAL_ACCESS)
    sys.stderr.flush()
    os.abort()


def hang(handler: Handler, body: dict[str, Any]) -> None:
    """Never answer (the lifetime timer still ends the process)."""
    while True:
        time.sleep(0.2)
