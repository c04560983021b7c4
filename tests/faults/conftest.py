"""Fixtures of the fault-injection suite: an isolated kvdiag home, fake builds, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from faults_helpers import Faults
from isolation import isolate


@pytest.fixture
def kv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Faults:
    """A scratch KVDIAG_HOME and lock root, no GPU visible, no user setting leaking in."""
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return Faults(tmp_path, capsys)
