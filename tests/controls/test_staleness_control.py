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


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not installed")
def test_the_ninja_control_sees_the_missing_object_behind_an_always_run_command(tmp_path):
    """The staged always-run command is discounted, the missing object behind it is not."""
    from kvdiag.controls import staleness as control
    from kvdiag.target.staleness import check_build_staleness

    for name, text in {"build.ninja": control._NINJA, ".ninja_log": control._NINJA_LOG, "assets.h": "",
                       "kernel.cu": "// staged\n"}.items():
        (tmp_path / name).write_text(text)
    st = check_build_staleness(tmp_path, generator="Ninja", log_dir=tmp_path, targets=["bin/test-backend-ops"])
    assert st.stale is True
    # ninja explains only the byproduct; the re-check behind it finds the missing object (and the binary)
    assert "output out/kernel.o doesn't exist (behind an always-run command)" in st.causes
    assert "1 always-run command(s) among them: Provisioning UI assets" in st.detail
