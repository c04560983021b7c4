"""Fixtures for the store tests."""

from __future__ import annotations

import copy

import pytest

from store_fixtures import TARGET


@pytest.fixture
def target() -> dict:
    return copy.deepcopy(TARGET)
