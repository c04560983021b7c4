"""The launcher: its command line, its JSON line, its exit codes (a GPU run behind the marker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdiag.controls import launch
from kvdiag.controls.canaries import CANARIES
from kvdiag.controls.launch import (
    EXIT_COMPILE,
    EXIT_NO_LAUNCHER,
    EXIT_OK,
    EXIT_USAGE,
    LaunchOutcome,
    arch_for,
    main,
    parse_launcher_line,
)

REPO = Path(__file__).resolve().parents[2]


def _child(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "kvdiag.controls.launch", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_list_prints_every_canary_with_its_expectation(capsys):
    assert main(["--list"]) == EXIT_OK
    out = capsys.readouterr().out
    for name, c in CANARIES.items():
        assert name in out
        if c.positive:
            assert f"{c.expected_kind} at {c.expected_site()}" in out


def test_list_json(capsys):
    assert main(["--list", "--json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(CANARIES)
    oob = next(r for r in rows if r["name"] == "oob_write")
    assert oob["expected_file"] == "oob_write.cu" and oob["expected_line"] == CANARIES["oob_write"].expected_line()
    assert oob["tool"] == "memcheck" and oob["n"] == 100 and oob["block"] == [128, 1, 1]


def test_list_runs_as_a_module_without_warnings():
    done = _child("--list")
    assert done.returncode == 0 and "barrier_divergent" in done.stdout
    assert done.stderr == ""        # no runpy "found in sys.modules" warning: the package imports lazily


@pytest.mark.parametrize("argv", [["no_such_canary"], [], ["--bogus"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == EXIT_USAGE


def test_no_launcher_exits_3_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(launch, "_pick_launcher", lambda wanted: (None, "pycuda: ModuleNotFoundError: x; "
                                                                        "cupy: ModuleNotFoundError: y"))
    assert main(["oob_write"]) == EXIT_NO_LAUNCHER
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("launch: no launcher: neither pycuda nor cupy")
    doc = parse_launcher_line(out)
    assert doc == {"launcher": None, "kernel": "oob_write", "ok": False,
                   "error": "no launcher: pycuda: ModuleNotFoundError: x; cupy: ModuleNotFoundError: y"}


def test_no_launcher_in_a_real_child_process():
    import importlib.util

    if importlib.util.find_spec("pycuda") or importlib.util.find_spec("cupy"):
        pytest.skip("a launcher is importable here")
    done = _child("uninit_read")
    assert done.returncode == EXIT_NO_LAUNCHER
    assert "neither pycuda nor cupy is importable" in done.stderr


def test_missing_cubin_exits_4(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch, "_pick_launcher", lambda wanted: ("cupy", ""))
    assert main(["oob_write", "--cubin", str(tmp_path / "none.cubin")]) == EXIT_COMPILE


def test_launcher_line_is_found_after_other_output():
    line = LaunchOutcome("pycuda", "oob_write", True, checksum=4950.0).to_line(arch="sm_90")
    stdout = f"some warning\n{{not json\n{line}\n"
    doc = parse_launcher_line(stdout)
    assert doc["launcher"] == "pycuda" and doc["ok"] is True and doc["arch"] == "sm_90"
    assert parse_launcher_line("nothing here\n") is None
    assert parse_launcher_line('{"launcher": "cupy"}\n') is None      # no ok: not ours


@pytest.mark.parametrize("cc,arch", [((9, 0), "sm_90"), ("9.0", "sm_90"), ("12.0", "sm_120"), ("86", "sm_86"),
                                     (None, "sm_90"), ("junk", "sm_90")])
def test_arch_for(cc, arch):
    assert arch_for(cc) == arch


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["pycuda", "cupy"])
def test_every_canary_launches_without_a_sanitizer(tmp_path, which):
    """On the device machine, both launch paths: all eight kernels run and return (none hangs)."""
    import importlib.util

    from kvdiag.workspace.gpu import fingerprint_gpu

    if not fingerprint_gpu(log_dir=tmp_path / "probe").available:
        pytest.skip("no CUDA GPU visible")
    if importlib.util.find_spec(which) is None:
        pytest.skip(f"{which} is not importable here")
    for name in CANARIES:
        done = _child(name, "--launcher", which, "--home", str(tmp_path / "home"))
        doc = parse_launcher_line(done.stdout)
        assert done.returncode == 0 and doc is not None, (name, done.stdout, done.stderr)
        assert doc["launcher"] == which and doc["kernel"] == name and doc["ok"] is True


def test_a_canary_builds_into_a_host_program_with_the_real_nvcc(tmp_path):
    """The route without pycuda/cupy: nvcc links the canary and canary_main.cu into one program."""
    from kvdiag.controls.canaries import CANARIES
    from kvdiag.controls.launch import Compiler, find_nvcc, native_argv

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not installed")
    compiler = Compiler(home=tmp_path, arch="sm_90", nvcc=nvcc, log_dir=tmp_path / "logs")
    c = CANARIES["barrier_divergent"]
    exe = compiler.executable(c)
    assert exe.is_file() and os.access(exe, os.X_OK) and exe.suffix == ".exe"
    assert compiler.executable(c) == exe                     # cached: nvcc does not run again
    assert native_argv(c, exe)[1:] == ["128", "32", "4", "1", "1", "1", "1", "1"]
    assert b"barrier_divergent.cu" in exe.read_bytes()       # -lineinfo names the canary's own file
