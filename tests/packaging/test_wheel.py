"""A built wheel, installed in a fresh venv, finds its registry, probes and canaries.

Only an editable install used to work (the data folders sit outside the package);
this builds the wheel from a copy of the source, installs it into a venv and runs
the CLI from a folder outside any source tree, with no PYTHONPATH, so the only
kvdiag it can import is the installed one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.engine_helpers import make_build, make_sanitizer
from venvs import make_venv

REPO = Path(__file__).resolve().parents[2]
SOURCE_PARTS = ("kvdiag", "registry", "probes", "repro", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


def _copy_source(dest: Path) -> Path:
    dest.mkdir()
    for part in SOURCE_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data"))
        else:
            shutil.copyfile(src, dest / part)
    return dest


def _quiet(argv: list[str], **kw) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the venv's kvdiag script, a work folder outside the tree) with the wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    src = _copy_source(root / "src")
    _quiet([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
            "-w", str(root / "dist"), str(src)], cwd=root, env=env)
    wheels = list((root / "dist").glob("kvdiag-*.whl"))
    assert len(wheels) == 1, wheels
    venv = root / "venv"
    python = make_venv(venv)            # from inside a venv too: see tests/venvs.py
    _quiet([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
            str(wheels[0])], cwd=root, env=env)
    shutil.rmtree(src)                  # nothing may read the copy the wheel was built from
    work = root / "work"
    work.mkdir()
    return venv / "bin" / "kvdiag", work


def _kvdiag(installed: tuple[Path, Path], *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    exe, work = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("KVDIAG_")}
    env.update(KVDIAG_HOME=str(work / "home"), KVDIAG_LOCK_DIR=str(work / "locks"), **env_extra)
    return subprocess.run([str(exe), *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_installed_package_reads_its_bundled_data(installed):
    exe, work = installed
    python = exe.parent / "python"
    code = "import kvdiag.resources as r; print(r.__file__); print(r.data_root())"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", code], cwd=work, env=env, capture_output=True, text=True, check=True)
    module, data_root = done.stdout.splitlines()
    venv = exe.parents[1]
    assert Path(module).is_relative_to(venv) and Path(data_root) == Path(module).parent / "_data"
    assert {p.name for p in (Path(data_root) / "registry").glob("D*.md")} >= {"D1.md", "D2.md", "D13.md"}


@pytest.mark.slow
def test_list_show_and_lint_from_outside_the_tree(installed):
    listed = _kvdiag(installed, "list")
    assert listed.returncode == 0, listed.stderr
    assert "D2" in listed.stdout and "D13" in listed.stdout
    shown = _kvdiag(installed, "show", "D2")
    assert shown.returncode == 0, shown.stderr
    assert "D2" in shown.stdout and "synccheck" in shown.stdout
    lint = _kvdiag(installed, "registry", "lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.slow
def test_run_against_a_stand_in_build_records_the_run(installed):
    """No GPU here: the run is skipped, but it loads D2 from the wheel and records run.json."""
    exe, work = installed
    build = make_build(work / "build", "backend_ops_d2_diverges")
    sanitizer = make_sanitizer(work / "sanitizer", "follow")
    done = _kvdiag(installed, "run", "D2", "--build", str(build), "--sanitizer", str(sanitizer),
                   "--quiet", CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 3, done.stdout + done.stderr          # ExitCode: skipped
    assert done.stdout.startswith("D2 SKIPPED"), done.stdout
    runs = [p for p in (work / "home" / "runs").iterdir() if p.name.endswith("-D2")]
    data = json.loads((runs[0] / "run.json").read_text())
    assert data["status"] == "finished" and data["outcome"]["verdict"] == "skipped"
