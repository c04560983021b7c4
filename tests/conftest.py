"""Test-session setup shared by every folder: the helpers in tests/ are importable, every
process the session starts carries its token (see process_checks.py), and the ``ninja``
fixture gives the tests that stage builds each of two ninja versions (see ninjas.py)."""

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ninjas import Ninja, system_ninja, wheel_ninja  # noqa: E402
from process_checks import mark_session  # noqa: E402

mark_session()

# A shell without job control starts its background jobs with SIGINT ignored, and Python then leaves it
# ignored: the tests that stage a Ctrl-C with _thread.interrupt_main would wait forever (a CI started that
# way hung in test_discover's Ctrl-C test). kvdiag as a program installs its own handlers
# (kvdiag.proc.signals); the tests' process gets Python's usual one.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# kvdiag's CUPTI launch lister is compiled with nvcc wherever one is installed (this CPU machine has
# one): only the tests about it build it (tests/workspace/test_launch_lister.py sets the variable back).
# A history named in the caller's environment would place the staged trees of other tests.
os.environ["KVDIAG_LAUNCH_LISTER"] = "0"
os.environ.pop("KVDIAG_HISTORY", None)


@pytest.fixture(scope="session", params=["system", "wheel"], ids=["system-ninja", "wheel-ninja"])
def ninja(request, tmp_path_factory) -> Ninja:
    """Each ninja in turn (tests/ninjas.py): the system's, then the PyPI wheel's, by absolute path."""
    if request.param == "system":
        found = system_ninja()
        if found is None:
            pytest.skip("no ninja on PATH")
        return found
    return _wheel(request, tmp_path_factory)


@pytest.fixture(scope="session")
def two_ninjas(request, tmp_path_factory) -> tuple[Ninja, Ninja]:
    """(the system's ninja, the wheel's): for a build made by one and checked by the other."""
    found = system_ninja()
    if found is None:
        pytest.skip("no ninja on PATH")
    return found, _wheel(request, tmp_path_factory)


def _wheel(request, tmp_path_factory) -> Ninja:
    cache = getattr(request.config, "cache", None)    # absent under `-p no:cacheprovider`
    folder = cache.mkdir("kvdiag-ninja") if cache is not None else tmp_path_factory.mktemp("kvdiag-ninja")
    try:
        return wheel_ninja(Path(folder))
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
