"""Fixtures of the server tests (the helpers are in server_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.registry.entry import Step
from kvdiag.server import run_server_attempt
from server_helpers import server_step, standin


@pytest.fixture
def attempt(tmp_path: Path):
    """Run one server attempt against a stand-in; short deadlines unless given."""

    def run(name: str, *args: str, step: Step | None = None, log_name: str | None = None, **kw):
        kw.setdefault("health_timeout", 8.0)
        kw.setdefault("request_timeout", 8.0)
        kw.setdefault("stop_grace", 2.0)
        return run_server_attempt(step or server_step(), standin(name, *args), None, tmp_path / "logs",
                                  log_name or name.replace("_", "-"), **kw)
    return run
