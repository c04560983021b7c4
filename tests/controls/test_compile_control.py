"""The compile steps' control: the real cmake + ninja + nvcc flow must print the staged
template mismatch at its marked line and compile the current call clean.

Needs no GPU (PTX only: 90-virtual), but nvcc, cmake and ninja on PATH; a CUDA configure
and two tiny objects take about 20 s on two busy cores.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

import kvdiag.controls.compile_control as control
from kvdiag.controls.compile_control import compile_control_gate, run_compile_control

DEFINES = {"CMAKE_CUDA_ARCHITECTURES": "90-virtual"}
toolchain = pytest.mark.skipif(any(shutil.which(t) is None for t in ("nvcc", "cmake", "ninja")),
                               reason="needs nvcc, cmake and ninja")


@toolchain
@pytest.mark.slow
def test_the_staged_mismatch_is_seen_and_the_current_call_compiles(ninja, tmp_path, monkeypatch):
    """Under each ninja (tests/ninjas.py: the system's and the PyPI wheel's), configured and run by path."""
    record = run_compile_control("test-key", tmp_path / "logs", DEFINES, None, ninja=ninja.path)
    assert record.positive_detected, record.positive_detail
    assert record.negative_clean, record.negative_detail
    assert record.passed
    assert "1 matched error line(s) at stale_call.cu(4)" == record.positive_detail
    configure = json.loads((tmp_path / "logs" / "compile-control-configure.cmd.json").read_text())
    assert f"-DCMAKE_MAKE_PROGRAM={ninja.path}" in configure["argv"]
    for step in ("objects", "build"):
        assert json.loads((tmp_path / "logs" / f"compile-control-{step}.cmd.json").read_text())["argv"][0] == \
            ninja.path
    # the gate runs it once per machine key, then answers from controls.json
    calls = []
    monkeypatch.setattr(control, "run_compile_control",
                        lambda key, *rest: calls.append(key) or dataclasses.replace(record, env_key=key))
    first = compile_control_gate(tmp_path / "home", tmp_path / "logs", DEFINES, None)
    second = compile_control_gate(tmp_path / "home", tmp_path / "logs", DEFINES, None)
    assert first.allowed and second.allowed and len(calls) == 1
    assert "compile control passed on this machine" in second.reason


def test_a_control_past_the_steps_deadline_is_no_consent_and_not_kept(tmp_path):
    gate = compile_control_gate(tmp_path / "home", tmp_path / "logs", DEFINES, None, deadline=0.0)
    assert not gate.allowed
    assert not (tmp_path / "home" / "controls.json").exists()


def test_without_the_toolchain_there_is_no_consent(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    gate = compile_control_gate(tmp_path / "home", tmp_path / "logs", DEFINES, None)
    assert not gate.allowed
    assert "could not read the tool versions" in gate.reason
    assert not (tmp_path / "home" / "controls.json").exists()
