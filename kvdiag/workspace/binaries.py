"""Which programs a build directory holds, by name, and whether it has the CUDA backend library.

Found by looking, not by asking CMake: a copied build or a release tarball has
no usable cache, and the programs are what kvdiag runs.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

# Where executables are looked for, in order of precedence (first found wins).
BINARY_DIRS = (
    "bin",
    "bin/Release",
    "bin/RelWithDebInfo",
    "bin/Debug",
    "bin/MinSizeRel",
    ".",
    "tests",
)
# Executable-bit files that are not programs: libraries, objects, scripts.
_NOT_A_PROGRAM = re.compile(
    r"(\.so(\.\d+)*|\.dylib|\.dll|\.a|\.lib|\.o|\.obj|\.pdb|\.exp|\.ilk|\.cmake|\.txt|\.json"
    r"|\.py|\.sh|\.bat|\.ps1|\.pl)$",
    re.I,
)
_CUDA_LIB = re.compile(r"^(lib)?ggml-cuda\.(so(\.\d+)*|dll|dylib)$", re.I)


# ELF, a script, PE, Mach-O (both byte orders, 32/64 bit, fat).
_PROGRAM_MAGIC = (b"\x7fELF", b"#!", b"MZ", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf",
                  b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def _is_program(path: Path) -> bool:
    """A regular file with the execute bit that starts like a program (mounts that mark
    every file executable would otherwise make sources look like programs)."""
    try:
        if not (path.is_file() and os.access(path, os.X_OK)) or _NOT_A_PROGRAM.search(path.name):
            return False
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(_PROGRAM_MAGIC)


def why_not_a_program(build_dir: Path, name: str) -> str | None:
    """Why ``name`` is not a usable program of the build, said precisely: not there at
    all (None), a folder that cannot be read, a directory, a symlink loop, no execute bit …"""
    for sub in BINARY_DIRS:
        directory = build_dir if sub == "." else build_dir / sub
        if sub == "bin" and directory.is_dir() and not os.access(directory, os.R_OK | os.X_OK):
            return f"{directory} cannot be read (permission denied)"
        path = directory / name
        if not os.path.lexists(path):
            continue
        try:
            st = path.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{path} is a symlink loop"
            return f"{path} cannot be used: {exc.strerror}"
        if stat.S_ISDIR(st.st_mode):
            return f"{path} is a directory, not a program"
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is not a regular file"
        if not os.access(path, os.X_OK) or not st.st_mode & 0o111:
            return f"{path} is not executable (no execute permission)"
        return f"{path} does not start like a program (no ELF or #! header)"
    return None


def find_binaries(build_dir: Path) -> dict[str, Path]:
    """Executables of a build dir by name (``.exe`` dropped): bin/ first, then the root, then tests/."""
    found: dict[str, Path] = {}
    for sub in BINARY_DIRS:
        directory = build_dir if sub == "." else build_dir / sub
        if not directory.is_dir():
            continue
        try:
            children = sorted(directory.iterdir())
        except OSError:
            continue
        for child in children:
            if not _is_program(child):
                continue
            name = child.name[:-4] if child.name.lower().endswith(".exe") else child.name
            found.setdefault(name, child)
    return found


def has_cuda_library(build_dir: Path) -> bool:
    for sub in ("bin", ".", "lib", "lib64"):
        directory = build_dir if sub == "." else build_dir / sub
        if directory.is_dir():
            try:
                if any(_CUDA_LIB.match(p.name) for p in directory.iterdir()):
                    return True
            except OSError:
                continue
    return False
