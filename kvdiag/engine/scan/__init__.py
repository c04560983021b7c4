"""`kvdiag scan`: a defect's blast radius, judged case by case through the verdict pipeline.

``session`` is one invocation; ``cases`` enumerates the case space and runs it; ``batch``
packs cases into one sanitized process; ``phases``/``route``/``overlap`` route cases bare
first and sanitize those that reach the entry's kernels; ``dispatch`` spreads units over
GPUs; ``kernels`` groups cases by kernel; ``radius`` writes a saved scan's radius table.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_scan": "session",
    "scan": "cases",
    "enumerate_cases": "cases",
    "CaseSpace": "cases",
    "ScanResult": "cases",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
