"""Virtual environments for the tests that install kvdiag, made from inside whatever runs the tests.

A newcomer runs the suite in a venv (`python3 -m venv v && . v/bin/activate && pip install
-e '.[test]'`), CI in a fresh one (.ci/run). A venv made for a test with ``python -m venv
--system-site-packages`` is then no copy of that environment: it inherits the *base*
interpreter's site-packages, which need not hold kvdiag's dependencies at all (the wheel's
`kvdiag` died importing click). Installing the dependencies into the new venv would need
the network or a wheel cache, and minutes.

So the new venv gets a ``.pth`` file naming the folders ``site`` adds to a fresh run of the
running interpreter: its site-packages, the user site, and the folders the ``.pth`` files
there name. Those are exactly where it imports the dependencies from, however it was
installed (a venv, the system, --user, a path file). Only folders are named: the import
lines of ``.pth`` files (an editable install's finder among them) are not run, and the venv's
own site-packages comes first on ``sys.path``, so what is installed into the venv wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PTH_NAME = "_kvdiag_test_dependencies.pth"
_PATH = "import json, sys; print(json.dumps(sys.path))"


def clean_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH or PYTHONHOME (they would leak into a venv's path)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _path_of(python: str, *flags: str) -> list[str]:
    with tempfile.TemporaryDirectory() as cwd:            # no source tree on the path by accident
        done = subprocess.run([python, *flags, "-c", _PATH], cwd=cwd, env=clean_env(), capture_output=True,
                              text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def site_folders(python: str = sys.executable) -> list[str]:
    """The folders ``site`` adds to a fresh run of ``python`` (compared with a run under ``-S``)."""
    bare = set(_path_of(python, "-S"))
    return [p for p in _path_of(python) if p and p not in bare and os.path.isdir(p)]


def make_venv(venv: Path, python: str = sys.executable) -> Path:
    """A venv of ``python``'s interpreter that imports what ``python`` imports (see the module's
    docstring); its own python. No pip of its own: ``-m pip`` finds the one ``python`` has."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], env=clean_env(), capture_output=True,
                   text=True, timeout=300, check=True)
    own = venv / "bin" / "python"
    purelib = subprocess.run([str(own), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             env=clean_env(), capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    (Path(purelib) / PTH_NAME).write_text("".join(f"{folder}\n" for folder in site_folders(python)))
    return own
