"""Fixtures of the engine scenario tests: an isolated kvdiag home and lock dir, and the scenario maker.

Not autouse: other test modules live in this folder too; the scenario tests ask for ``kv``
(which brings ``isolated``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from engine_helpers import REGISTRY, Scenarios, SharedTargets
from kvdiag.registry.loader import load_registry


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs, controls and GPU slot locks under tmp_path; no user setting leaks in."""
    monkeypatch.setenv("KVDIAG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KVDIAG_LOCK_DIR", str(tmp_path / "locks"))
    for name in ("KVDIAG_COMPUTE_SANITIZER", "KVDIAG_REGISTRY", "LLAMA_KV_BUILD", "LLAMA_KV_MODEL"):
        monkeypatch.delenv(name, raising=False)
    # The fakes start with `#!/usr/bin/env python3`: let that be this interpreter (no
    # version-manager shim in between, which costs a shell per fake process).
    pybin = tmp_path / "pybin"
    pybin.mkdir()
    (pybin / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{pybin}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(scope="session")
def shared_targets(tmp_path_factory) -> SharedTargets:
    return SharedTargets(tmp_path_factory.mktemp("shared-scenarios"))


@pytest.fixture
def kv(tmp_path: Path, shared_targets: SharedTargets, isolated) -> Scenarios:
    return Scenarios(tmp_path / "kv", shared_targets)


@pytest.fixture(scope="session")
def d2():
    """The real registry entry D2."""
    return load_registry(REGISTRY).get("D2")
