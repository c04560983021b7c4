"""Where kvdiag's data lives: the registry, the probe patches and the canary kernels.

They are kept as top-level folders of the repository (``registry/``, ``probes/``,
``repro/canaries/``) so they read as data, not code. A source checkout or an
editable install reads them there; a wheel carries copies under ``kvdiag/_data/``
with the same relative layout (``setup.py``'s build step puts them there). Every
module that needs one of these folders asks this one, so the two layouts stay
one decision.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DATA = PACKAGE_DIR / "_data"
# The folders a wheel carries, relative to the data root (setup.py copies these).
DATA_FOLDERS = ("registry", "probes", "repro/canaries", "repro/launches")


def data_root() -> Path:
    """The folder holding ``registry/``, ``probes/`` and ``repro/canaries/``."""
    return BUNDLED_DATA if BUNDLED_DATA.is_dir() else PACKAGE_DIR.parent


def data_path(relative: str) -> Path:
    """A path named in an entry (``probes/X.patch``) or by kvdiag, under the data root."""
    return data_root() / relative


def registry_dir() -> Path:
    return data_root() / "registry"


def probes_dir() -> Path:
    return data_root() / "probes"


def canaries_dir() -> Path:
    return data_root() / "repro" / "canaries"


def import_root() -> Path:
    """The folder holding the ``kvdiag`` package: a child ``python -m kvdiag…`` needs it on PYTHONPATH."""
    return PACKAGE_DIR.parent
