"""Packaging step pyproject.toml cannot declare: copy the data folders into wheels.

``registry/``, ``probes/`` and ``repro/canaries/`` stay top-level folders of the
repository; a built package gets copies under ``kvdiag/_data/`` (see
kvdiag/resources.py, which resolves either layout). An editable install keeps
reading the repository's folders, so nothing is copied for it.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA_FOLDERS = ("registry", "probes", "repro/canaries", "repro/launches")   # as kvdiag.resources.DATA_FOLDERS


class build_py_with_data(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "kvdiag" / "_data"
        shutil.rmtree(target, ignore_errors=True)
        for folder in DATA_FOLDERS:
            shutil.copytree(ROOT / folder, target / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": build_py_with_data})
