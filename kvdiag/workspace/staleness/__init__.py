"""Is a build current with its sources? Asked of the build tool's own dry run.

``check`` asks it (``ninja -n``, ``make -n``, ``make -q``) and answers; ``ninja_explain``,
``ninja_recheck``, ``ninja_log`` and ``make_depfiles`` read what the dry run cannot say alone.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "check_build_staleness": "check",
    "Staleness": "check",
    "not_checked": "check",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
