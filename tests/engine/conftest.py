"""Fixtures of the engine scenario tests: an isolated kvdiag home and lock dir, and the scenario maker.

Not autouse: other test modules live in this folder too; the scenario tests ask for ``kv``
(which brings ``isolated``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_helpers import REGISTRY, Scenarios, SharedTargets
from isolation import isolate
from kvdiag.registry.loader import load_registry


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs, controls and GPU slot locks under tmp_path; no user setting leaks in."""
    isolate(monkeypatch, tmp_path)


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
