"""The observe stage: what one attempt's processes left, parsed once, and what reads it.

``observe`` parses the output once; ``matchers`` (and ``relative``, against a comparison arm)
say whether it shows the defect; ``launch_proof`` says which kernels ran under the sanitizer.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "Observations": "observe",
    "match": "matchers",
    "LaunchContext": "launch_proof",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
