"""The controls gate the engine consults before a sanitizer-based not-reproduced.

A tool's canary pair is run lazily, once per machine key, the first time a run
would otherwise conclude not-reproduced from that tool, so `kvdiag run` works
without a prior `kvdiag doctor`, and a failed or missing control turns the
verdict into inconclusive with the reason.
"""

from __future__ import annotations

import threading
from pathlib import Path

from kvdiag.controls.cache import not_reproduced_gate
from kvdiag.controls.doctor import ensure_control
from kvdiag.controls.gate import Gate, GateProvider, no_sanitizer_gate
from kvdiag.engine.verdict.target import Target


def controls_gate_provider(home: Path, target: Target, log_dir: Path) -> GateProvider:
    """A gate per tool, computed once: safe to call from the worker threads of a scan or sweep
    (the first caller runs the control, the others wait for its answer)."""
    memo: dict[str | None, Gate] = {}
    lock = threading.Lock()

    def provider(tool: str | None) -> Gate:
        if tool is None:
            return no_sanitizer_gate(None)
        with lock:
            if tool not in memo:
                memo[tool] = _gate_for(home, target, tool, log_dir)
            return memo[tool]

    return provider


def _gate_for(home: Path, target: Target, tool: str, log_dir: Path) -> Gate:
    try:
        ensure_control(home, target.environment, tool, target.sanitizer, log_dir)
    except Exception as exc:  # a control that cannot run is a reason, never a crash
        return Gate(False, f"{tool}'s control could not run on this machine: {exc}")
    return not_reproduced_gate(home, target.environment.key(), tool)
