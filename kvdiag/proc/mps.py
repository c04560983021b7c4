"""Whether the CUDA processes kvdiag starts will be clients of an MPS daemon.

CUDA's runtime connects a process to the MPS control daemon listening in the pipe folder that
``CUDA_MPS_PIPE_DIRECTORY`` names (``/tmp/nvidia-mps`` when unset), and nothing in the process's
output says so. It changes what a pool of sanitized processes does: with MPS their kernels run on
the GPU at once instead of taking turns (sixteen racecheck copies did 9.97 times one copy's work
against 1.94 without, docs/performance.md, device session 27), and by MPS's documentation a fatal GPU
error of one client reaches the others running then. So a discovery records which it was; kvdiag never starts or stops
a daemon (that is the machine's administrator's choice).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
DEFAULT_PIPE = "/tmp/nvidia-mps"
CONTROL_SOCKET = "control"          # the daemon's socket in its pipe folder, which clients connect to
# The control socket's type. Measured on an H100 (device session 28, driver 580.159.04): a running
# nvidia-cuda-mps-control's `control` accepts SOCK_SEQPACKET connections and refuses SOCK_STREAM ones
# ("Protocol wrong type for socket"), so a stream probe took a running daemon for none.
CONTROL_SOCKET_TYPE = socket.SOCK_SEQPACKET
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class MpsPipe:
    """The pipe folder of a listening MPS control daemon, and whether the environment named it."""

    folder: str
    named: bool                     # named by CUDA_MPS_PIPE_DIRECTORY (else the default folder)

    def to_dict(self) -> dict[str, Any]:
        return {"pipe": self.folder, "named_by": PIPE_VARIABLE if self.named else "default"}

    @classmethod
    def from_dict(cls, doc: Any) -> "MpsPipe | None":
        """A saved record, or None for an absent or damaged one (an older document has none)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("pipe"), str) or not doc["pipe"]:
            return None
        return cls(doc["pipe"], doc.get("named_by") == PIPE_VARIABLE)

    def describe(self) -> str:
        how = f"named by {PIPE_VARIABLE}" if self.named else "the default folder"
        return (f"MPS: the processes were clients of the MPS daemon at {self.folder} ({how}): their kernels "
                "ran on the GPU at once, and by MPS's documentation a fatal GPU error of one reaches the others "
                "running then")


def mps_pipe(environ: Mapping[str, str] | None = None, default: str = DEFAULT_PIPE) -> MpsPipe | None:
    """The daemon CUDA processes started with ``environ`` (default: this process's) would connect to, or
    None when none listens there. Listening is tested by connecting to its control socket (a sequenced-
    packet socket, as the daemon's is) and closing at once: a socket file left by a daemon that quit
    accepts nothing. What a real daemon does (an H100, device session 28): its `control` socket took a
    sequenced-packet connection while it ran, and its socket files stayed in the folder after `quit`; its
    control.log showed "Unable to accept connection" after such a connection closed at once. This function
    as it now is has met staged sockets only (it spoke stream before, and missed that daemon)."""
    env = os.environ if environ is None else environ
    named = env.get(PIPE_VARIABLE) or ""
    folder = named or default
    path = str(Path(folder) / CONTROL_SOCKET)
    probe = socket.socket(socket.AF_UNIX, CONTROL_SOCKET_TYPE)
    probe.settimeout(CONNECT_TIMEOUT_S)
    try:
        probe.connect(path)
    except (OSError, ValueError):       # absent, not a socket, refused, or a path too long for AF_UNIX
        return None
    finally:
        probe.close()
    return MpsPipe(folder, bool(named))
