"""D13's detector control: the dry run must see a staged stale build before 'current' counts."""

from __future__ import annotations

import shutil

import pytest

from kvdiag.controls.staleness import staleness_control


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not installed")
def test_ninja_dry_run_sees_the_staged_stale_build(tmp_path):
    gate = staleness_control("Ninja", tmp_path)
    assert gate.allowed, gate.reason
    assert "ninja -n" in gate.reason


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cmake") is None, reason="make/cmake missing")
def test_cmake_makefiles_dry_run_sees_the_staged_stale_build(tmp_path):
    gate = staleness_control("Unix Makefiles", tmp_path)
    assert gate.allowed, gate.reason


def test_a_dry_run_that_cannot_run_is_no_control(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither ninja nor make can be found
    gate = staleness_control("Ninja", tmp_path)
    assert not gate.allowed
    assert "proves nothing" in gate.reason
