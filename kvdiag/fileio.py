"""Every file kvdiag writes goes through here, so that no write can destroy what it should not.

A write lands atomically (a temporary file beside the target, fsync, ``os.replace``)
and only onto a *regular file* or a *new path*. ``os.replace`` onto a device node,
a FIFO or a directory would swap the node itself for a regular file (``-o /dev/full``
once replaced the device; a FIFO's reader then blocks forever), so those are refused
with one line (exit 64).

Writing through a symlink stays allowed, when the link is yours: ``-o latest.sarif``
where ``latest.sarif`` points at this week's report is a common way to keep a stable
name, and replacing the link instead would silently detach the user's file from it.
Its final target is what gets written, the link stays a link, and the command says
which file it wrote (``wrote X (through symlink Y)``: see :func:`written_as`). A link
on the way owned by another user (not you, not root) is refused (exit 64), as
kvdiag.trust refuses it on the way to the home: in a shared folder such as /tmp,
another user's ``report.sarif -> ~/.bashrc`` would otherwise replace your file.
(The kernel's protected_symlinks does not help here: kvdiag resolves the link itself
and writes the target by its real path.) A link that loops or dangles into a missing
folder is refused.

A write that fails (disk full, read-only folder) raises :class:`WriteFailed` naming
the path and the OS's reason; the temporary file is removed and the old file is
left as it was.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from kvdiag.errors import OutputRefused, OutputUnwritable, UsageError, WriteFailed
from kvdiag.trust import foreign_link

__all__ = ["JSONTooDeep", "JSONTooLarge", "OutputRefused", "WriteFailed", "atomic_file", "load_json_file",
           "output_target", "parse_json", "prepare_output", "read_json", "write_atomic", "write_json", "written_as"]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def output_target(path: Path | str) -> Path:
    """The path a write to ``path`` really lands on: ``path`` itself when it is new or a
    regular file, the final target when it is a symlink; OutputRefused otherwise."""
    given = Path(path)
    target = given
    link = foreign_link(given)
    if link is not None:
        raise OutputRefused(f"refusing to write {given}: {link[0]} is a symlink owned by uid {link[1]}, "
                            f"not by you (uid {os.getuid()}) or root")
    if given.is_symlink():
        try:
            target = Path(os.path.realpath(given, strict=True))
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutputRefused(f"refusing to write {given}: it is a symlink loop") from None
            target = Path(os.path.realpath(given))        # dangling: the link's target is created,
            if not target.parent.is_dir():                 # but never a folder on the way to it
                raise OutputRefused(f"refusing to write {given}: it is a symlink into a missing folder "
                                    f"({target.parent})") from None
    try:
        st = os.stat(target)
    except FileNotFoundError:
        parent = target.parent
        if parent.exists() and not parent.is_dir():
            raise OutputRefused(f"refusing to write {given}: {parent} is not a directory") from None
        return target
    except OSError as exc:
        raise OutputRefused(f"cannot write {given}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputRefused(f"refusing to write {given}: it is {_kind(st.st_mode)}, not a regular file "
                            f"(kvdiag replaces only regular files)")
    return target


# The path's fault, not the machine's: a missing or unmakeable folder, no permission, read-only.
_PATH_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG}


def prepare_output(path: Path | str) -> Path:
    """Check an output path before the work that fills it: :func:`output_target`'s refusals, and its
    folder made now (as the write would make it) so that an unwritable place is refused in one line
    before a sweep or scan runs, not after."""
    target = _with_folder(path)
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise OutputUnwritable(f"cannot write {path}: {target.parent} is not writable")
    return target


#: the first folder a write had to make on the way to each target, for written_as to say (issue 43:
#: `-o newdir/sub/x.json` made newdir/sub without a word)
_made_folders: dict[Path, Path] = {}


def _with_folder(path: Path | str) -> Path:
    """:func:`output_target` of ``path``, with the folder it lands in made (a failure named by ``path``)."""
    target = output_target(path)
    missing = next((p for p in reversed(target.parent.parents) if not p.exists()), None) \
        or (None if target.parent.exists() else target.parent)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(Path(path), exc) from None
    if missing is not None:
        _made_folders[target] = missing
    return target


def _fail(path: Path, exc: OSError) -> WriteFailed:
    kind = OutputUnwritable if exc.errno in _PATH_ERRNOS else WriteFailed
    return kind(f"cannot write {path}: {exc.strerror or exc}")


@contextmanager
def atomic_file(path: Path | str, mode: str = "wb", encoding: str | None = None) -> Iterator[BinaryIO]:
    """Open a temporary file for writing that becomes ``path`` when the block ends without error."""
    given = Path(path)
    target = _with_folder(given)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        fh = open(tmp, mode, encoding=encoding if "b" not in mode else None)
    except OSError as exc:
        raise _fail(given, exc) from None
    try:
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        output_target(given)             # still a regular file (or new) right before the swap
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _fail(given, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def commit_atomic(tmp: Path | str, path: Path | str) -> Path:
    """Move a finished temporary file (written by a library that wants a path) onto ``path``."""
    given = Path(path)
    try:
        target = output_target(given)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _fail(given, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def temp_beside(path: Path | str) -> Path:
    """A temporary path beside the write's real target, for :func:`commit_atomic`."""
    target = _with_folder(path)
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def write_atomic(path: Path | str, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` atomically (see the module's rules); returns the file written:
    ``path`` itself, or the target of the symlink ``path`` is."""
    raw = data.encode(encoding) if isinstance(data, str) else data
    target = output_target(path)
    with atomic_file(path, "wb") as fh:
        fh.write(raw)
    return target


def written_as(given: Path | str, written: Path | str) -> str:
    """How every command names a write: the file written, the symlink it went through when
    ``given`` was one (``/data/r.sarif (through symlink latest.sarif)``: the user asked for the
    link, but what changed is the file behind it), and the folder it made on the way, if any
    (``out/x.json (made folder out)``)."""
    made = _made_folders.pop(Path(written), None)
    folder = f" (made folder {made})" if made is not None else ""
    if Path(given) == Path(written):
        return f"{given}{folder}"
    return f"{written} (through symlink {given}){folder}"


def write_json(path: Path | str, data: Any) -> Path:
    """JSON, indented, one trailing newline; atomic like every write; returns the file written."""
    return write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


MAX_JSON_BYTES = 256 << 20     # a sweep of every entry is a few MB; more is not a file kvdiag wrote
MAX_JSON_DEPTH = 64            # kvdiag's own documents nest less than 10 deep


class JSONTooDeep(ValueError):
    """A JSON document nested deeper than kvdiag reads: malformed, like any other ValueError of JSON."""


class JSONTooLarge(ValueError):
    """A JSON document larger than kvdiag reads into memory."""


def parse_json(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` bounded in depth: the one way kvdiag parses JSON it did not just make.

    ``'[' * 100000`` made ``json.loads`` raise RecursionError, which every reader let
    through (`kvdiag runs`, `history` and `report` died with exit 70 on one such run.json);
    a document between ~100 and ~1000 levels parsed, then broke whatever walked it
    recursively. Here both are a :class:`JSONTooDeep`, a ``ValueError``: what each reader
    already calls a malformed file (an "unreadable" row in a listing, exit 65 for a file
    named on the command line, a miss for a cache)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONTooDeep(f"the JSON is nested too deeply (more than {max_depth} levels)") from None
    if _deeper_than(value, max_depth):
        raise JSONTooDeep(f"the JSON is nested too deeply (more than {max_depth} levels)")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def load_json_file(path: Path | str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file, bounded in size and depth: OSError when it cannot be read, ValueError
    (:class:`JSONTooLarge`, :class:`JSONTooDeep`, not UTF-8, not JSON) when it is malformed."""
    with open(path, "rb") as fh:
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise JSONTooLarge(f"more than {max_bytes} bytes, too large to be a file kvdiag wrote")
    return parse_json(raw.decode("utf-8"))


def read_json(path: Path | str, what: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON document kvdiag wrote earlier, read with bounds: missing is a UsageError (64);
    too large, not UTF-8, not JSON or nested absurdly deep is a DataError (65) saying which."""
    from kvdiag.errors import DataError

    path = Path(path)
    try:
        return load_json_file(path, max_bytes)
    except FileNotFoundError:
        raise UsageError(f"no such {what} file: {path}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not a {what}: byte {exc.start} is not UTF-8") from None
    except JSONTooLarge:
        raise DataError(f"{path}: {path.stat().st_size} bytes is too large for a {what} (limit {max_bytes})") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise DataError(f"{path}: not a {what}: {exc}") from None
