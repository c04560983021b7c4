"""`kvdiag run`: one verdict per entry against the user's build.

``session.run_verdicts`` prepares the target once and hands each entry to the verdict
pipeline; ``attribution`` names the test case that killed a walk; ``overrides`` checks
``--set`` before anything runs.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_verdicts": "session",
    "attribute_outcome": "attribution",
    "validated_sets": "overrides",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
