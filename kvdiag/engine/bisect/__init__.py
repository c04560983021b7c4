"""`kvdiag bisect`: which commit introduced a defect, or which fixed it.

``bisection`` drives ``git bisect run``; ``step`` is one step (build the commit, run, judge);
``resume`` takes steps an earlier bisection judged; ``marks`` holds git's marks to the steps.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_bisect": "bisection",
    "BisectRequest": "bisection",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
