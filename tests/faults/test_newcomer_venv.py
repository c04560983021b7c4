"""Issue 28: the README's test command passes in a newcomer's venv, and CI runs it in one.

`tests/packaging/test_wheel.py` made its venv with `--system-site-packages`; run from
inside a venv, that inherits the *base* interpreter's site-packages, and the wheel's
`kvdiag` died importing click (2 failed in a fresh venv; CI installed into the system
python and never saw it). The scenario stages the newcomer's case whatever this
machine's base interpreter holds: a venv whose click comes from a folder only that
venv knows, and from inside it the venv a test would make.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click

from faults_helpers import REPO

TESTS = REPO / "tests"


def _run(argv: list, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, env=env,
                          cwd=kw.pop("cwd", None), **kw)


def test_a_venv_made_from_inside_a_newcomers_venv_imports_what_that_venv_imports(tmp_path):
    deps = tmp_path / "only-the-newcomer-venv-has-these"
    deps.mkdir()
    (deps / "click").symlink_to(Path(click.__file__).parent)
    newcomer = tmp_path / "newcomer-venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", newcomer]).returncode == 0
    site = _run([newcomer / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    (Path(site.stdout.strip()) / "deps.pth").write_text(f"{deps}\n")

    made = tmp_path / "test-venv"
    code = (f"import sys, pathlib; sys.path.insert(0, {str(TESTS)!r}); from venvs import make_venv; "
            f"make_venv(pathlib.Path({str(made)!r}))")
    done = _run([newcomer / "bin" / "python", "-c", code], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    probe = "import click, importlib.util; print(click.__file__); print(importlib.util.find_spec('kvdiag'))"
    seen = _run([made / "bin" / "python", "-c", probe], cwd=tmp_path)
    assert seen.returncode == 0, seen.stderr
    click_file, kvdiag_spec = seen.stdout.splitlines()
    assert Path(click_file).parent.parent == deps          # the newcomer venv's click, not the base interpreter's
    assert kvdiag_spec == "None"                            # and nothing else: no kvdiag leaks in


def test_ci_runs_the_readme_lines_in_a_fresh_venv():
    script = (REPO / ".ci" / "run").read_text()
    commands = [ln.strip() for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Run the tests\s*```\s*\n(.*?)\n```", readme, re.S)
    assert block and commands[-1] == block.group(1).strip()
    assert commands[-1] == "python3 -m pip install -e '.[test]' && python3 -m pytest -q"
    venv_made = next(i for i, ln in enumerate(commands) if re.match(r'python3 -m venv "\$venv"$', ln))
    activated = next(i for i, ln in enumerate(commands) if ln == '. "$venv/bin/activate"')
    assert venv_made < activated < len(commands) - 1
    assert any(ln.startswith('venv="$(mktemp -d') for ln in commands)
    assert "trap 'rm -rf \"$venv\"' EXIT" in commands
