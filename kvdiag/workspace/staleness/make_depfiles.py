"""Header dependencies `make -n` cannot see yet: CMake Makefiles' unconsolidated compiler depfiles.

Since CMake 3.20 the Makefile generators let the compiler write each object's
dependencies (``<object>.d``) and fold them into the target's
``compiler_depend.make`` only in the "depend" step at the start of the *next*
build. Until then that file is CMake's empty placeholder, so after a first
build ``make -n`` knows no header of any object: a header edit is invisible to
the dry run although the real ``make`` (which consolidates first) rebuilds.
For those targets this module reads the depfiles the next build would read and
applies make's own rule to them: an object older than one of its prerequisites
is out of date.
"""

from __future__ import annotations

from pathlib import Path

PLACEHOLDER = "# Empty compiler generated dependencies file"
MAX_DEPFILES = 20000


def _placeholder_targets(build_dir: Path) -> list[Path]:
    """Target folders (CMakeFiles/<t>.dir) whose compiler_depend.make is still the empty placeholder."""
    dirs = []
    for marker in build_dir.rglob("compiler_depend.make"):
        try:
            with marker.open(encoding="utf-8", errors="replace") as fh:
                head = fh.read(len(PLACEHOLDER))
        except OSError:
            continue
        if head == PLACEHOLDER:
            dirs.append(marker.parent)
    return sorted(dirs)


def _prerequisites(depfile: Path) -> list[str]:
    """The prerequisites of a make-format depfile (`obj: a b \\` ...), backslash-escaped spaces kept."""
    text = depfile.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
    prereqs: list[str] = []
    for rule in text.splitlines():
        _, sep, tail = rule.partition(": ")
        if sep:
            prereqs += [token.replace("\0", " ") for token in tail.replace("\\ ", "\0").split()]
    return prereqs


def unconsolidated_causes(build_dir: Path) -> tuple[int, list[str]]:
    """(depfiles read, "output X older than most recent input Y" for each out-of-date object)."""
    read, causes = 0, []
    for target_dir in _placeholder_targets(build_dir):
        compile_dir = target_dir.parent.parent  # the compiler ran in the target's binary folder
        for depfile in sorted(target_dir.rglob("*.d")):
            obj = depfile.with_suffix("")
            if read >= MAX_DEPFILES or not obj.is_file():
                continue
            read += 1
            try:
                obj_mtime = obj.stat().st_mtime_ns
                newest, newest_path = 0, None
                for prereq in _prerequisites(depfile):
                    path = Path(prereq) if Path(prereq).is_absolute() else compile_dir / prereq
                    try:
                        mtime = path.stat().st_mtime_ns
                    except OSError:
                        continue
                    if mtime > newest:
                        newest, newest_path = mtime, prereq
            except OSError:
                continue
            if newest_path is not None and newest > obj_mtime:
                rel = obj.relative_to(build_dir).as_posix()
                causes.append(f"output {rel} older than most recent input {newest_path} "
                              f"(from {depfile.name}, which CMake folds into compiler_depend.make only at the next build)")
    return read, causes
