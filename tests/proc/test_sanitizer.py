"""SanitizerInvocation.argv, find_sanitizer, sanitizer_version."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from proc_helpers import SCENARIOS, scenario
from kvdiag.errors import UsageError
from kvdiag.proc import sanitizer as sanmod
from kvdiag.proc.runner import run_command
from kvdiag.proc.sanitizer import (
    SANITIZER_ERROR_EXITCODE,
    SanitizerInvocation,
    find_sanitizer,
    parse_sanitizer_version,
    sanitizer_version,
)

SAN = Path("/opt/cuda/bin/compute-sanitizer")
LOG = Path("/runs/r1/memcheck.log")


def test_argv_minimal():
    assert SANITIZER_ERROR_EXITCODE == 99
    argv = SanitizerInvocation("memcheck").argv(SAN, LOG, ["./test-backend-ops", "-o", "MUL_MAT"])
    assert argv == (str(SAN), "--tool", "memcheck", "--log-file", str(LOG), "--error-exitcode", "99",
                    "./test-backend-ops", "-o", "MUL_MAT")


def test_argv_with_every_option():
    inv = SanitizerInvocation("racecheck", options=("--show-backtrace", "device"), kernel_filter="mul_mat_q",
                              print_limit=0, launch_timeout=120, destroy_on_device_error="kernel")
    argv = inv.argv(SAN, LOG, ["prog"])
    assert argv[:7] == (str(SAN), "--tool", "racecheck", "--log-file", str(LOG), "--error-exitcode", "99")
    assert argv[7:] == ("--kernel-name", "kns=mul_mat_q", "--print-limit", "0", "--launch-timeout", "120",
                        "--destroy-on-device-error", "kernel", "--show-backtrace", "device", "prog")


def test_percent_in_the_log_path_is_escaped():
    argv = SanitizerInvocation("initcheck").argv(SAN, Path("/runs/50%/x.log"), ["p"])
    assert argv[4] == "/runs/50%%/x.log"


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck", "initcheck"])
def test_known_tools(tool):
    assert SanitizerInvocation(tool).argv(SAN, LOG, ["p"])[2] == tool


@pytest.mark.parametrize("kwargs", [
    dict(tool="leakcheck"),
    dict(tool="memcheck", options=("--tool", "racecheck")),
    dict(tool="memcheck", options=("--log-file=x",)),
    dict(tool="memcheck", options=("--error-exitcode", "1")),
    dict(tool="memcheck", options="--leak-check full"),
    dict(tool="memcheck", kernel_filter="mul_mat_q,regex=x"),
    dict(tool="memcheck", kernel_filter="ggml_cuda::mul_mat<float>"),
    dict(tool="memcheck", kernel_filter=""),
    dict(tool="memcheck", print_limit=-1),
    dict(tool="memcheck", launch_timeout=1.5),
    dict(tool="memcheck", destroy_on_device_error="process"),
])
def test_invalid_invocations(kwargs):
    with pytest.raises(ValueError):
        SanitizerInvocation(**kwargs)


def test_empty_program_argv_is_refused():
    with pytest.raises(ValueError):
        SanitizerInvocation("memcheck").argv(SAN, LOG, [])


def test_parse_version():
    text = ("NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2025 NVIDIA Corporation\n"
            "Version 2025.3.1.0 (build 36398583) (public-release)\n")
    assert parse_sanitizer_version(text) == "2025.3.1.0"
    assert parse_sanitizer_version("no version here") is None


def test_sanitizer_version_runs_through_run_command(tmp_path):
    fake = SCENARIOS / "fake_compute_sanitizer.py"
    assert sanitizer_version(fake, tmp_path / "logs") == "2025.3.1.0"
    assert (tmp_path / "logs" / "compute-sanitizer-version.cmd.json").exists()


def test_invocation_report_goes_to_the_log_file_and_findings_exit_99(tmp_path, monkeypatch):
    fake = SCENARIOS / "fake_compute_sanitizer.py"
    monkeypatch.setenv("KVDIAG_FAKE_SANITIZER_MODE", "one-error")
    report = tmp_path / "run" / "memcheck.log"
    report.parent.mkdir()
    argv = SanitizerInvocation("memcheck", print_limit=0).argv(fake, report, scenario("exits_with.py", 0))
    r = run_command(argv, timeout=30, log_dir=tmp_path / "run", name="memcheck")
    assert r.returncode == SANITIZER_ERROR_EXITCODE
    assert r.stdout_text() == "exiting with 0\n"                 # the program's own output
    assert "ERROR SUMMARY: 1 error" in report.read_text()         # the tool's report, apart


# ---------------------------------------------------------------- find_sanitizer

def _fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Version 2025.1.0.0 (build 1)'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No sanitizer anywhere: empty PATH entry, no CUDA_HOME, no system path, no wheel."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("KVDIAG_COMPUTE_SANITIZER", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sanmod, "_SYSTEM_CANDIDATES", (tmp_path / "no" / "compute-sanitizer",))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "no-site")])
    return tmp_path


def test_find_nothing(clean_env):
    assert find_sanitizer() is None


def test_find_explicit(clean_env):
    fake = _fake_binary(clean_env / "x" / "compute-sanitizer")
    assert find_sanitizer(fake) == fake
    assert find_sanitizer(fake.parent) == fake          # a directory holding it
    with pytest.raises(UsageError, match="not an executable"):
        find_sanitizer(clean_env / "missing")


def test_find_from_environment_variable(clean_env, monkeypatch):
    fake = _fake_binary(clean_env / "envsan" / "compute-sanitizer")
    monkeypatch.setenv("KVDIAG_COMPUTE_SANITIZER", str(fake))
    assert find_sanitizer() == fake
    monkeypatch.setenv("KVDIAG_COMPUTE_SANITIZER", str(clean_env / "gone"))
    with pytest.raises(UsageError, match="KVDIAG_COMPUTE_SANITIZER"):
        find_sanitizer()


def test_find_on_path_before_cuda_home(clean_env, monkeypatch):
    on_path = _fake_binary(clean_env / "pathbin" / "compute-sanitizer")
    _fake_binary(clean_env / "cuda" / "bin" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(clean_env / "cuda"))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_sanitizer() == on_path


def test_find_in_cuda_home_then_system(clean_env, monkeypatch):
    system = _fake_binary(clean_env / "usr-local-cuda" / "bin" / "compute-sanitizer")
    monkeypatch.setattr(sanmod, "_SYSTEM_CANDIDATES", (system,))
    assert find_sanitizer() == system
    in_home = _fake_binary(clean_env / "cuda" / "bin" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(clean_env / "cuda"))
    assert find_sanitizer() == in_home


@pytest.mark.parametrize("layout", [
    "nvidia/cu13/bin/compute-sanitizer",                         # nvidia-cuda-sanitizer-api 13.x
    "nvidia/cu13/compute-sanitizer/compute-sanitizer",
    "nvidia/cuda_sanitizer_api/bin/compute-sanitizer",           # nvidia-cuda-sanitizer-api-cu12
])
def test_find_in_a_pip_wheel(clean_env, monkeypatch, layout):
    site = clean_env / "venv" / "lib" / "python3.11" / "site-packages"
    fake = _fake_binary(site / layout)
    monkeypatch.setattr(sys, "path", ["", str(clean_env / "elsewhere"), str(site)])
    assert find_sanitizer() == fake


def test_a_wheel_file_without_execute_permission_is_skipped(clean_env, monkeypatch):
    site = clean_env / "site-packages"
    fake = _fake_binary(site / "nvidia/cuda_sanitizer_api/bin/compute-sanitizer")
    fake.chmod(0o644)                  # the cu12 wheel records mode 644 for it
    monkeypatch.setattr(sys, "path", [str(site)])
    assert find_sanitizer() is None
