"""Which MPS daemon, if any, CUDA processes started from here connect to (kvdiag.proc.mps).

A daemon is staged as what CUDA's runtime finds: a Unix sequenced-packet socket named `control`,
listening, in the pipe folder (a real daemon's, device session 28). No test starts a real daemon (CI has
no GPU and no driver).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kvdiag.proc.mps import PIPE_VARIABLE, MpsPipe, mps_pipe


@pytest.fixture
def short_dir():
    """A folder with a short path: a Unix socket's path has at most 107 bytes, and pytest's tmp_path with a
    long test's name can pass that."""
    folder = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp" if Path("/tmp").is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def listening(short_dir):
    """A folder whose `control` socket listens, as a running control daemon's pipe folder does."""
    folder = short_dir / "pipe"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(str(folder / "control"))
    server.listen(4)
    yield folder
    server.close()


def test_the_folder_the_variable_names_is_found_when_its_daemon_listens(listening, tmp_path):
    pipe = mps_pipe({PIPE_VARIABLE: str(listening)}, default=str(tmp_path / "absent"))
    assert pipe == MpsPipe(str(listening), named=True)
    assert pipe.to_dict() == {"pipe": str(listening), "named_by": PIPE_VARIABLE}
    assert "clients of the MPS daemon at" in pipe.describe() and "named by CUDA_MPS_PIPE_DIRECTORY" in pipe.describe()


def test_without_the_variable_the_default_folder_is_the_one_cuda_would_use(listening):
    pipe = mps_pipe({}, default=str(listening))
    assert pipe == MpsPipe(str(listening), named=False) and "the default folder" in pipe.describe()
    assert mps_pipe({PIPE_VARIABLE: ""}, default=str(listening)) == pipe      # empty counts as unset


def test_a_socket_left_by_a_daemon_that_died_is_no_daemon(short_dir):
    folder = short_dir / "pipe"
    folder.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(str(folder / "control"))                   # bound, never listening: connecting is refused
    dead.close()
    assert (folder / "control").is_socket()
    assert mps_pipe({PIPE_VARIABLE: str(folder)}) is None


@pytest.mark.parametrize("staged", ["absent", "file", "folder", "long"])
def test_anything_but_a_listening_socket_is_no_daemon(tmp_path, staged):
    folder = tmp_path / "pipe"
    folder.mkdir()
    if staged == "file":
        (folder / "control").write_text("not a socket")
    elif staged == "folder":
        (folder / "control").mkdir()
    elif staged == "long":
        folder = folder / ("x" * 200)                    # longer than a Unix socket's path may be
    assert mps_pipe({PIPE_VARIABLE: str(folder)}, default=str(tmp_path / "absent")) is None


@pytest.mark.parametrize("damaged", [None, {}, {"pipe": ""}, {"pipe": 3}, ["pipe"], "pipe"])
def test_a_saved_record_reads_back_and_a_damaged_or_absent_one_reads_as_none(damaged):
    assert MpsPipe.from_dict({"pipe": "/p", "named_by": PIPE_VARIABLE}) == MpsPipe("/p", named=True)
    assert MpsPipe.from_dict({"pipe": "/p", "named_by": "default"}) == MpsPipe("/p", named=False)
    assert MpsPipe.from_dict(damaged) is None


def test_a_stream_socket_named_control_is_no_daemon(short_dir):
    """What the probe looked for before device session 28: a real daemon's control socket refuses a stream
    connection, and a stream listener named `control` is not one."""
    folder = short_dir / "pipe"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "control"))
    server.listen(4)
    try:
        assert mps_pipe({PIPE_VARIABLE: str(folder)}) is None
    finally:
        server.close()
