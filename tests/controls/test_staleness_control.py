"""D13's detector control: the machine's own build tool must call a staged build it just built
current, and stale after a header edit, before 'nothing to rebuild' counts.

Run under two ninjas (the ``ninja`` fixture: the system's 1.11 and the PyPI wheel's 1.13, whose
build logs differ in format), and with make for CMake's Makefiles and for a plain Makefile.
A control refused under either ninja fails here.
"""

from __future__ import annotations

import shutil

import pytest

from kvdiag.controls.cache import load_control
from kvdiag.controls.staleness import prove_current, run_staleness_control, staged_files, staleness_control
from kvdiag.workspace.staleness.check import Staleness

needs_cmake_make = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cmake") is None
                                      or shutil.which("cc") is None, reason="make, cmake or cc missing")


def test_the_ninja_control_passes_with_this_ninja(ninja, tmp_path):
    record = run_staleness_control("Ninja", tmp_path / "logs", program=ninja.path)
    assert record.passed, (record.positive_detail, record.negative_detail)
    assert ninja.version in record.detail and ninja.path in record.detail
    # the fresh build is current with the always-run command discounted; the edit is found behind it
    assert "3 step(s) ignored, pending only behind always-run command(s): Provisioning UI assets" in \
        record.negative_detail
    assert ("output out/kernel.o older than most recent input kernel.h (re-checked: ninja named only an "
            "always-run command's byproduct)") in record.positive_detail


def test_the_gate_runs_the_control_once_per_ninja_binary(ninja, tmp_path):
    home = tmp_path / "home"
    first = staleness_control("Ninja", tmp_path / "logs", program=ninja.path, home=home)
    assert first.allowed, first.reason
    key = f"staleness|ninja -n|{ninja.path}:"
    doc = (home / "controls.json").read_text()
    assert key in doc
    (record_key,) = [k for k in __import__("json").loads(doc) if k.startswith(key)]
    assert load_control(home, record_key, "staleness").passed
    again = staleness_control("Ninja", tmp_path / "logs2", program=ninja.path, home=home)
    assert again == first
    assert not (tmp_path / "logs2").exists()         # answered from controls.json: nothing ran


@needs_cmake_make
def test_the_cmake_makefiles_control_is_configured_and_built_by_cmake_and_make(tmp_path):
    record = run_staleness_control("Unix Makefiles", tmp_path / "logs", program=shutil.which("make"))
    assert record.passed, (record.positive_detail, record.negative_detail)
    assert "kernel.h (from main.c.o.d" in record.positive_detail


@pytest.mark.skipif(shutil.which("make") is None, reason="make missing")
def test_the_plain_make_control(tmp_path):
    fresh = Staleness(checked=True, stale=False, tool="make -q", pending=(), detail="make -q: up to date",
                      program=shutil.which("make"))
    proven = prove_current(fresh, generator=None, log_dir=tmp_path / "logs")
    assert proven.proof and proven.proof.startswith("the make -q control (GNU Make"), proven


@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles", None])
def test_nothing_staged_is_a_file_a_build_tool_writes(generator):
    """No .ninja_log, .ninja_deps, CMakeCache.txt or generated Makefile of any tool version:
    the tool under test writes those itself."""
    names = set(staged_files(generator))
    assert not names & {".ninja_log", ".ninja_deps", "CMakeCache.txt", "compiler_depend.make"}
    assert names <= {"build.ninja", "CMakeLists.txt", "Makefile", "kernel.cu", "main.c", "kernel.h"}


def test_a_dry_run_that_cannot_run_is_no_control(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither ninja nor make can be found
    gate = staleness_control("Ninja", tmp_path)
    assert not gate.allowed
    assert gate.reason.startswith("the ninja -n control could not build its staged project")
    assert gate.reason.endswith("proves nothing here")


def test_a_current_answer_the_control_does_not_prove_becomes_not_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    fresh = Staleness(checked=True, stale=False, tool="ninja -n", pending=(), detail="ninja: no work to do")
    answer = prove_current(fresh, generator="Ninja", log_dir=tmp_path / "logs")
    assert (answer.checked, answer.stale, answer.proof) == (False, None, None)
    assert answer.detail.startswith("the dry run found nothing to rebuild (ninja: no work to do), but the ninja -n "
                                    "control could not build its staged project")
    stale = Staleness(checked=True, stale=True, tool="ninja -n", pending=(), detail="1 build step(s) would run")
    assert prove_current(stale, generator="Ninja", log_dir=tmp_path / "logs") is stale   # needs no control
