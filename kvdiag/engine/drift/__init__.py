"""`kvdiag drift`: how far off quantized FlashAttention numbers are, over repeated runs.

``session`` is one invocation; ``measure`` runs the cases and judges the drift.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_drift": "measure",
    "judge_drift": "measure",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
