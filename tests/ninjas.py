"""Two ninjas for the tests that stage builds: the system's, and the `ninja` wheel from PyPI.

ninja's build log changed format between releases (1.11 writes `# ninja log v5`, 1.13 `v7`)
and a ninja rewrites a log of another version as it starts. The staleness check and its
control must work with whichever ninja a machine has, so their tests run under both: the
system ninja (1.11 on the test machine and in CI) and the PyPI wheel (1.13.x, Kitware's
build, the one the GPU image ships).

The wheel is installed with ``pip install --target`` into pytest's cache folder, never into
the environment: installed there, its ``ninja`` would land on PATH and shadow the system's
for every other test. Its binary is run by absolute path only. ``KVDIAG_TEST_NINJA`` names
a ninja binary to use instead (a machine without PyPI); without one and without PyPI the
tests that need it fail, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WHEEL = "ninja==1.13.*"


@dataclass(frozen=True)
class Ninja:
    origin: str      # "system" or "wheel"
    path: str        # absolute
    version: str     # as --version prints it

    @property
    def log_version(self) -> int:
        """The build log format this ninja writes (ninja 1.11: 5, 1.12: 6, 1.13: 7)."""
        major, minor = (int(x) for x in self.version.split(".")[:2])
        return 5 if (major, minor) < (1, 12) else 6 if (major, minor) < (1, 13) else 7


def version_of(path: str) -> str:
    return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()


def system_ninja() -> Ninja | None:
    found = shutil.which("ninja")
    return Ninja("system", os.path.realpath(found), version_of(found)) if found else None


def wheel_ninja(cache_dir: Path) -> Ninja:
    """The wheel's ninja, installed into ``cache_dir`` once (or $KVDIAG_TEST_NINJA)."""
    given = os.environ.get("KVDIAG_TEST_NINJA")
    if given:
        return Ninja("wheel", given, version_of(given))
    target = cache_dir / "ninja-wheel"
    binary = _binary_in(target)
    if binary is None:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                               "--disable-pip-version-check", "--target", str(target), WHEEL],
                              capture_output=True, text=True, timeout=600)
        binary = _binary_in(target)
        if binary is None:
            raise RuntimeError(f"could not install {WHEEL} with pip --target {target} (exit {done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-600:]}; set KVDIAG_TEST_NINJA to a "
                               f"ninja binary to run these tests offline")
    return Ninja("wheel", str(binary), version_of(str(binary)))


def _binary_in(target: Path) -> Path | None:
    """The wheel's ninja: ``bin/ninja`` (1.12 and later put the binary itself there) or
    ``ninja/data/bin/ninja`` (older wheels)."""
    for candidate in (target / "bin" / "ninja", target / "ninja" / "data" / "bin" / "ninja"):
        if candidate.is_file() and os.access(candidate, os.X_OK) and _is_program(candidate):
            return candidate
    return None


def _is_program(path: Path) -> bool:
    """A binary, not a Python console-script wrapper (which would need the package on sys.path)."""
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF"
