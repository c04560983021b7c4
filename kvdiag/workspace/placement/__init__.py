"""Where a tree without a usable git history lies in a known one (issue #41).

``blobs`` hashes the files the registry names (git's blob ids) and reads the version stamps,
``blob_timeline`` says which commits of a history held each content, ``placed_history`` answers the
range questions for a tree placed that way.
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "tree_blobs": "blobs",
    "read_version_stamp": "blobs",
    "Timeline": "blob_timeline",
    "PlacedHistory": "placed_history",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
