"""kvdiag.workspace.build.probe_backend_ops against fake test-backend-ops programs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from target_helpers import write_exe, write_py_exe
from kvdiag.errors import UsageError
from kvdiag.workspace.build import parse_modes, parse_ops_list, probe_backend_ops

UPSTREAM_USAGE = """\
Usage: ./test-backend-ops [mode] [-o <op,..>] [-b <backend>] [-p <params regex>] [--output <console|sql|csv>] [--list-ops] [--show-coverage] [--test-file <path>] [-j <n>]
    valid modes:
      - test (default, compare with CPU backend for correctness)
      - grad (compare gradients from backpropagation with method of finite differences)
      - perf (performance evaluation)
      - support (probe backend operation support)
    op names for -o are as given by ggml_op_desc() (e.g. ADD, MUL_MAT, etc),
        optionally including the full test case string (e.g. "ADD(type=f16,ne=[1,1,8,1],nr=[1,1,1,1],nf=1)")
    --output specifies output format (default: console, options: console, sql, csv)
    --list-ops lists all available GGML operations
    --show-coverage shows test coverage
"""
FORK_USAGE = UPSTREAM_USAGE.replace("[-j <n>]", "[-j <n>] [--seed <n>]")
OLD_USAGE = """\
Usage: ./test-backend-ops [mode] [-o op] [-b backend]
  valid modes are: test (compare with CPU backend for correctness) or perf (performance evaluation)
  op names are as given by ggml_op_desc()
"""
LIST_OPS = "GGML operations:\n  ABS\n  ADD\n  FLASH_ATTN_EXT\n  MUL_MAT\n  SWIGLU\n\nTotal: 5 operations\n"


def fake_backend_ops(tmp_path: Path, usage: str, *, list_ops: str | None = LIST_OPS,
                     usage_stream: str = "stdout", list_rc: int = 0) -> Path:
    """A test-backend-ops that, like upstream, prints usage and exits 1 on --help."""
    body = f"""
import sys
USAGE = {usage!r}
LIST = {list_ops!r}
if sys.argv[1:] == ["--list-ops"] and LIST is not None:
    sys.stdout.write(LIST)
    sys.exit({list_rc})
getattr(sys, {usage_stream!r}).write(USAGE)
sys.exit(1)
"""
    return write_py_exe(tmp_path / "bin" / "test-backend-ops", body)


def test_upstream(tmp_path, log_dir):
    info = probe_backend_ops(fake_backend_ops(tmp_path, UPSTREAM_USAGE), log_dir=log_dir)
    assert info.help_text == UPSTREAM_USAGE
    assert info.has_seed is False
    assert info.has_test_file is True
    assert info.has_parallel_jobs is True
    assert info.has_list_ops is True
    assert info.modes == ("test", "grad", "perf", "support")
    assert info.ops == ("ABS", "ADD", "FLASH_ATTN_EXT", "MUL_MAT", "SWIGLU")
    assert info.notes == ()


def test_fork_with_seed(tmp_path, log_dir):
    info = probe_backend_ops(fake_backend_ops(tmp_path, FORK_USAGE), log_dir=log_dir)
    assert info.has_seed is True and info.has_parallel_jobs is True
    assert json.loads(json.dumps(info.to_dict()))["has_seed"] is True


def test_old_usage_without_list_ops(tmp_path, log_dir):
    info = probe_backend_ops(fake_backend_ops(tmp_path, OLD_USAGE, list_ops=None), log_dir=log_dir)
    assert info.modes == ("test", "perf")
    assert (info.has_seed, info.has_test_file, info.has_parallel_jobs, info.has_list_ops) == (
        False, False, False, False)
    assert info.ops == ()
    # --list-ops was never run: only --help's logs exist
    assert sorted(p.name for p in log_dir.glob("*.cmd.json")) == ["backend-ops-help.cmd.json"]


def test_usage_on_stderr_is_read(tmp_path, log_dir):
    info = probe_backend_ops(fake_backend_ops(tmp_path, FORK_USAGE, usage_stream="stderr"), log_dir=log_dir)
    assert info.has_seed is True and info.modes[0] == "test"


def test_list_ops_failure_is_noted(tmp_path, log_dir):
    info = probe_backend_ops(fake_backend_ops(tmp_path, UPSTREAM_USAGE, list_rc=3), log_dir=log_dir)
    assert info.ops == ()
    assert info.notes == ("--list-ops failed: exit 3",)


def test_fixture_fork_shell_script(fixture_build, log_dir):
    binary = fixture_build("lineinfo") / "bin" / "test-backend-ops"
    info = probe_backend_ops(binary, log_dir=log_dir)
    assert info.has_seed and info.has_test_file and info.has_parallel_jobs
    assert info.ops == ("ADD", "FLASH_ATTN_EXT", "MUL_MAT")
    assert info.path == binary


def test_silent_program(tmp_path, log_dir):
    binary = write_exe(tmp_path / "test-backend-ops", "exit 0\n")
    info = probe_backend_ops(binary, log_dir=log_dir)
    assert info.help_text == "" and info.modes == () and info.ops == ()
    assert info.notes == ("--help printed nothing (exit 0)",)


def test_missing_binary(tmp_path, log_dir):
    with pytest.raises(UsageError):
        probe_backend_ops(tmp_path / "nope" / "test-backend-ops", log_dir=log_dir)


def test_parse_ops_list_variants():
    assert parse_ops_list(LIST_OPS) == ("ABS", "ADD", "FLASH_ATTN_EXT", "MUL_MAT", "SWIGLU")
    assert parse_ops_list("ADD, MUL\nMUL_MAT  CPY\nAvailable ops\nADD\n") == ("ADD", "MUL", "MUL_MAT", "CPY")
    assert parse_ops_list("Usage: x\n  op names are as given by ggml_op_desc()\n") == ()


def test_parse_modes_absent():
    assert parse_modes("Usage: test-backend-ops [options]\n") == ()
