"""Paths only this user controls: kvdiag's home and its folders, the lock folders, and the
symlinks an output file is written through.

kvdiag reads back what it keeps (run records, caches, scratch builds) and writes its pid
into lock files, so whoever else can write those folders can steer it: plant a cache
file, swap a run record, aim a lock file at ``~/.bashrc``. One rule for all of them:

- the folder is owned by you;
- it is not group- or world-writable, unless its sticky bit is set (others may then add
  entries but not rename or remove yours, and a folder they add is theirs: refused in turn);
- no symlink on the way to it, neither a component of the path nor one inside a link's
  target, is owned by anyone but you or root: another user's link decides where the path
  leads. Root's links (``/var/run`` and the like) are trusted, as root can write anything.

A refusal is the caller's :class:`~kvdiag.errors.UnsafePath` (a usage error, exit 64): one
line naming the path and why, and nothing created or written past the check.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvdiag.errors import UnsafePath

__all__ = ["folder_problem", "foreign_link", "trusted_dir"]

ROOT_UID = 0
MAX_LINKS = 40                 # the kernel's own limit before ELOOP


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def foreign_link(path: Path | str) -> tuple[str, int] | None:
    """The first symlink on the way to ``path`` owned by neither you nor root, as
    (the link, its owner's uid); None when there is none.

    The path is walked as the kernel resolves it: each component is looked at with
    ``lstat``, and a link's target is walked in turn (an absolute one from ``/``), so
    a link hidden inside another link's target is seen too. A component that does not
    exist ends the walk: nothing below it can be a link yet.
    """
    me = os.getuid()
    text = os.fspath(path)
    pending = list(reversed(_parts(text if text.startswith("/") else os.path.join(os.getcwd(), text))))
    current, followed = "/", 0
    while pending:
        part = pending.pop()
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        try:
            st = os.lstat(step)
            if not stat.S_ISLNK(st.st_mode):
                current = step
                continue
            if st.st_uid not in (me, ROOT_UID):
                return step, st.st_uid
            target = os.readlink(step)
        except OSError:
            return None
        followed += 1
        if followed > MAX_LINKS:
            return None                # a loop: whatever uses the path fails on it by itself
        if target.startswith("/"):
            current = "/"
        pending.extend(reversed(_parts(target)))
    return None


def folder_problem(path: Path | str) -> str | None:
    """Why only you would not control the folder ``path`` (see the module's rule); None when you do."""
    me = os.getuid()
    link = foreign_link(path)
    if link is not None:
        return f"{link[0]} is a symlink owned by uid {link[1]}, not by you (uid {me}) or root"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"it cannot be used: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != me:
        return f"it is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"it is group- or world-writable (mode {stat.S_IMODE(st.st_mode):o}) without the sticky bit"
    return None


def trusted_dir(path: Path | str, what: str, advice: str = "", error: type[UnsafePath] = UnsafePath) -> Path:
    """The folder ``path``, created (mode 0700) when missing, once it passes the module's rule;
    else ``error``: ``refusing <what> <path>: <why>; <advice>``.

    Links are checked before anything is created, so a folder is never made at the end of
    another user's link."""
    path = Path(path)
    link = foreign_link(path)
    if link is None:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except FileExistsError:
            pass                           # not a folder: said below
        except OSError as exc:
            raise error(f"{what} {path} cannot be created: {exc.strerror}") from None
    problem = folder_problem(path)
    if problem is not None:
        raise error(f"refusing {what} {path}: {problem}" + (f"; {advice}" if advice else ""))
    return path
