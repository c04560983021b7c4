"""Test-session setup shared by every folder: the helpers in tests/ are importable, and every
process the session starts carries its token (see process_checks.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from process_checks import mark_session  # noqa: E402

mark_session()
