"""Controls: canary kernels that prove a compute-sanitizer tool sees its defect class here.

``canaries`` is the catalogue (one positive and one fixed twin per tool, the
expected line found from a ``KVDIAG-EXPECT`` marker in the .cu source),
``launch`` compiles and launches one canary (the program the sanitizer watches),
``doctor`` runs and judges the pairs, and ``cache`` keeps the outcome per
machine key and answers the engine's gate for ``not-reproduced``.

The names below are loaded on first use: ``python -m kvdiag.controls.launch``
runs under compute-sanitizer and must not import the doctor (nor itself twice).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ALL_TOOLS": "canaries",
    "CANARIES": "canaries",
    "PAIRS": "canaries",
    "Canary": "canaries",
    "ControlPair": "canaries",
    "pair_for": "canaries",
    "ControlRecord": "cache",
    "Gate": "gate",
    "ensure_control": "doctor",
    "load_control": "cache",
    "not_reproduced_gate": "cache",
    "store_controls": "cache",
    "Check": "doctor",
    "ControlResult": "doctor",
    "DoctorReport": "doctor",
    "doctor_exit_code": "doctor",
    "format_report": "doctor",
    "run_doctor": "doctor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
