"""`kvdiag sweep`: every selected entry against one build, the target prepared once.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_sweep": "session",
    "select_entries": "session",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
