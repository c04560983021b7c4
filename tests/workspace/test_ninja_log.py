"""A dry run never costs the user's build its .ninja_log: another ninja's log format is left alone.

Real ninja (each of two versions, tests/ninjas.py), a one-step build: the log this machine's ninja wrote is safe to dry-run against;
the same log with another version's header makes the staleness check decline, and the file
is byte-for-byte what it was.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kvdiag.workspace.staleness.ninja_log import log_conflict, log_version
from kvdiag.workspace.staleness.check import _ninja_staleness

pytestmark = pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not installed")


def built(tmp_path, ninja: str = "ninja"):
    root = tmp_path / "b"
    root.mkdir()
    (root / "build.ninja").write_text("rule cp\n  command = cp $in $out\nbuild out.txt: cp in.txt\n")
    (root / "in.txt").write_text("x\n")
    subprocess.run([ninja, "-C", str(root)], check=True, capture_output=True)
    return root


def test_the_log_this_ninja_wrote_is_dry_run_as_before(tmp_path, ninja):
    root = built(tmp_path, ninja.path)
    assert log_version(root / ".ninja_log") == ninja.log_version
    assert log_conflict(root, ninja.path) is None
    st = _ninja_staleness(root, [], False, tmp_path / "logs", ninja.path)
    assert (st.checked, st.stale, st.program) == (True, False, ninja.path)


def test_another_ninjas_log_is_left_alone_and_the_check_says_why(tmp_path, ninja):
    root = built(tmp_path, ninja.path)
    log = root / ".ninja_log"
    mine = log_version(log)
    other = log.read_text().replace(f"# ninja log v{mine}", f"# ninja log v{mine - 1}", 1)
    log.write_text(other)
    why = log_conflict(root, ninja.path)
    assert why is not None and f"log v{mine - 1}" in why and f"writes log v{mine}" in why
    st = _ninja_staleness(root, [], False, tmp_path / "logs", ninja.path)
    assert st.checked is False and "would discard that log" in st.detail
    assert log.read_text() == other  # ninja was not run there


def test_no_log_no_conflict(tmp_path):
    root = tmp_path / "fresh"
    root.mkdir()
    assert log_conflict(root) is None
