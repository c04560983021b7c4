"""Shared fixtures for the registry tests.

Every test sees the project's own registry unless it names another folder: a
KVDIAG_REGISTRY left in the developer's shell must not change what is loaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_registry_override(monkeypatch):
    monkeypatch.delenv("KVDIAG_REGISTRY", raising=False)


@pytest.fixture
def project_dir() -> Path:
    return PROJECT


@pytest.fixture
def registry_dir() -> Path:
    return PROJECT / "registry"


@pytest.fixture
def registry_fixtures() -> Path:
    return PROJECT / "tests" / "fixtures" / "registry"


@pytest.fixture
def transcripts_dir() -> Path:
    return PROJECT / "tests" / "fixtures" / "transcripts"
