"""kvdiag.trust: the one check of the home's folders and the lock folders, and its link walk."""

from __future__ import annotations

import os
import stat

import pytest

from kvdiag.errors import UnsafeLockPath, UnsafePath
from kvdiag.trust import folder_problem, foreign_link, trusted_dir

ROOT = os.geteuid() == 0
OTHER_UID = 12345
needs_root = pytest.mark.skipif(not ROOT, reason="another user's link is staged with lchown (root)")


def _foreign(link):
    os.lchown(link, OTHER_UID, OTHER_UID)
    return str(link)


def test_a_folder_made_here_is_0700_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        made = trusted_dir(tmp_path / "a" / "home", "home")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and folder_problem(made) is None


@needs_root
def test_the_walk_finds_another_users_link_inside_your_own_links_target(tmp_path):
    (tmp_path / "real" / "deep").mkdir(parents=True)
    theirs = tmp_path / "real" / "theirs"
    theirs.symlink_to("deep")
    bad = _foreign(theirs)
    mine = tmp_path / "mine"
    mine.symlink_to(tmp_path / "real" / "theirs")
    assert foreign_link(mine / "home") == (bad, OTHER_UID)
    relative = tmp_path / "relative"
    relative.symlink_to("real/../real/theirs")
    assert foreign_link(relative) == (bad, OTHER_UID)
    assert foreign_link(tmp_path / "real" / "deep") is None


def test_links_of_your_own_or_roots_lead_where_they_point(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "mine").symlink_to(tmp_path / "real")
    assert foreign_link(tmp_path / "mine" / "not-yet" / "home") is None
    assert trusted_dir(tmp_path / "mine" / "home", "home") == tmp_path / "mine" / "home"
    assert (tmp_path / "real" / "home").is_dir()


def test_a_link_loop_is_refused_by_the_folder_check(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert foreign_link(loop) is None
    assert folder_problem(loop) == "it cannot be used: Too many levels of symbolic links"


def test_sticky_keeps_a_shared_folder_usable_and_the_callers_error_is_raised(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert folder_problem(shared) is None
    shared.chmod(0o777)
    with pytest.raises(UnsafeLockPath, match=r"mode 777\) without the sticky bit; use yours"):
        trusted_dir(shared, "lock directory", "use yours", UnsafeLockPath)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(UnsafePath, match="refusing home .*/file: it is not a directory$"):
        trusted_dir(file, "home")
