"""Fixtures for the report tests: the canned sweeps of `report_fixtures`."""

from __future__ import annotations

import pytest

from report_fixtures import d2_outcome, hostile_outcome, make_sweep
from kvdiag.store.sweeps import Sweep


@pytest.fixture
def sweep() -> Sweep:
    return make_sweep()


@pytest.fixture
def hostile_sweep() -> Sweep:
    return make_sweep([d2_outcome(), hostile_outcome()])


@pytest.fixture
def d2_sweep() -> Sweep:
    return make_sweep([d2_outcome()])
