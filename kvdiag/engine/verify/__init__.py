"""`kvdiag verify`: the entry's repro before and after a fix probe, and the numeric test.

``session`` is one invocation; ``numeric`` runs the touched op plainly; ``reuse`` lets a
recorded run stand in for the BEFORE arm.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "verify_fix": "session",
    "VerifyRequest": "session",
    "VerifyReport": "session",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
