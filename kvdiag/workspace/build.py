"""What the user's build is: its configuration, programs, source state and currency, in one record.

:func:`inspect_build` assembles :class:`BuildInfo` from the modules that each
read one thing (``cmake``, ``binaries``, ``git``, ``staleness``); the probe of
``test-backend-ops`` lives in ``backend_ops``. Every external command goes
through :func:`kvdiag.proc.runner.run_command`; nothing here calls ``subprocess``.
The other modules' names are re-exported here, where callers have long found them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvdiag.errors import UsageError
from kvdiag.workspace.backend_ops import (
    PROBE_TIMEOUT_S,
    BackendOpsInfo,
    parse_modes,
    parse_ops_list,
    probe_backend_ops,
    probe_help,
)
from kvdiag.workspace.binaries import BINARY_DIRS, find_binaries, has_cuda_library
from kvdiag.workspace.cmake import (
    CMAKE_CACHE,
    CUDA_OPTIONS,
    build_options,
    cache_lineinfo,
    cache_make_program,
    cache_source_dir,
    cmake_bool,
    lineinfo_in_flags,
    nonempty,
    parse_cmake_cache,
    read_cmake_cache,
)
from kvdiag.workspace.git import GitState, git_state, git_state_or_why
from kvdiag.workspace.staleness.check import STALENESS_TIMEOUT_S, Staleness, check_build_staleness, not_checked

__all__ = [
    "BINARY_DIRS",
    "CMAKE_CACHE",
    "PROBE_TIMEOUT_S",
    "STALENESS_TIMEOUT_S",
    "BackendOpsInfo",
    "BuildInfo",
    "GitState",
    "Staleness",
    "check_build_staleness",
    "cmake_bool",
    "find_binaries",
    "git_state",
    "inspect_build",
    "lineinfo_in_flags",
    "parse_cmake_cache",
    "parse_modes",
    "parse_ops_list",
    "probe_backend_ops",
    "probe_help",
    "read_cmake_cache",
    "source_tree_build",
]


@dataclass(frozen=True)
class BuildInfo:
    build_dir: Path
    generator: str | None  # "Ninja" | "Unix Makefiles" | ... ; None without a CMakeCache.txt
    source_dir: Path | None
    cuda: bool | None  # None only when there is no CMakeCache.txt and nothing shows it
    cuda_architectures: str | None
    cuda_flags: str | None
    lineinfo: bool
    build_type: str | None
    options: Mapping[str, str]
    binaries: Mapping[str, Path]
    git: GitState | None
    staleness: Staleness
    cache_path: Path | None = None  # the CMakeCache.txt read, None when there is none
    lineinfo_source: str | None = None  # why lineinfo is True, e.g. "CMAKE_CUDA_FLAGS: -lineinfo"
    cuda_compiler_version: str | None = None  # CMAKE_CUDA_COMPILER_VERSION, e.g. "13.0.88"
    notes: tuple[str, ...] = field(default=())
    make_program: str | None = None  # CMAKE_MAKE_PROGRAM when it exists here: the tool its dry run uses

    def has_binary(self, name: str) -> bool:
        return name in self.binaries

    def binary(self, name: str) -> Path | None:
        return self.binaries.get(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "build_dir": str(self.build_dir),
            "generator": self.generator,
            "source_dir": str(self.source_dir) if self.source_dir is not None else None,
            "cuda": self.cuda,
            "cuda_architectures": self.cuda_architectures,
            "cuda_flags": self.cuda_flags,
            "cuda_compiler_version": self.cuda_compiler_version,
            "lineinfo": self.lineinfo,
            "lineinfo_source": self.lineinfo_source,
            "build_type": self.build_type,
            "options": dict(sorted(self.options.items())),
            "binaries": {k: str(v) for k, v in sorted(self.binaries.items())},
            "git": self.git.to_dict() if self.git is not None else None,
            "staleness": self.staleness.to_dict(),
            "cache_path": str(self.cache_path) if self.cache_path is not None else None,
            "make_program": self.make_program,
            "notes": list(self.notes),
        }


def source_tree_build(source_dir: Path, *, log_dir: Path) -> BuildInfo:
    """A source tree with no build of it: what a compile step needs (the tree and its commit), nothing more.

    A bisection of an entry whose step compiles its own objects (D7) builds nothing at each commit;
    the step configures its own scratch build of this tree."""
    root = _existing_dir(Path(source_dir).expanduser())
    git, why = git_state_or_why(root, log_dir=Path(log_dir), exclude=None)
    notes = ["no build: a source tree only (a compile step configures its own scratch build of it)"]
    return BuildInfo(build_dir=root, generator=None, source_dir=root, cuda=None, cuda_architectures=None,
                     cuda_flags=None, lineinfo=False, build_type=None, options=MappingProxyType({}),
                     binaries=MappingProxyType({}), git=git, staleness=not_checked("a source tree, not a build"),
                     notes=tuple(notes + ([why] if why else [])))


def _existing_dir(given: Path) -> Path:
    if not given.exists():
        raise UsageError(f"build folder does not exist: {given}")
    if not given.is_dir():
        raise UsageError(f"build folder {given} is not a folder")
    if not os.access(given, os.R_OK | os.X_OK):
        raise UsageError(f"build folder {given} cannot be read (permission denied)")
    return given.resolve()


def check_build_dir(build_dir: Path) -> Path:
    """The build folder, resolved; UsageError when it is none (missing, a file, unreadable,
    neither a CMakeCache.txt nor an executable in it). Asked before a run makes its folder:
    a run that cannot start leaves nothing in the run store."""
    given = Path(build_dir).expanduser()
    root = _existing_dir(given)
    if not (root / CMAKE_CACHE).is_file() and not find_binaries(root):
        raise UsageError(f"{given} is not a build directory: no {CMAKE_CACHE} and no executables in bin/, ./ or tests/")
    return root


def inspect_build(
    build_dir: Path,
    *,
    log_dir: Path,
    check_staleness: bool = True,
    targets: Sequence[str] = (),
) -> BuildInfo:
    """Describe the build in ``build_dir``. UsageError when it is not a build at all."""
    given = Path(build_dir).expanduser()
    root = check_build_dir(given)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)

    cache_path = root / CMAKE_CACHE
    has_cache = cache_path.is_file()
    binaries = find_binaries(root)

    notes: list[str] = []
    if has_cache:
        cache = read_cmake_cache(cache_path)
        generator = nonempty(cache.get("CMAKE_GENERATOR"))
        source_dir = cache_source_dir(cache)
        cuda: bool | None = any(cmake_bool(cache.get(k)) for k in CUDA_OPTIONS)
        cuda_architectures = nonempty(cache.get("CMAKE_CUDA_ARCHITECTURES"))
        cuda_flags = cache.get("CMAKE_CUDA_FLAGS")
        cuda_flags = cuda_flags.strip() if cuda_flags is not None else None
        build_type = nonempty(cache.get("CMAKE_BUILD_TYPE"))
        lineinfo, lineinfo_source = cache_lineinfo(cache, build_type)
        options = build_options(cache)
        cuda_compiler_version = nonempty(cache.get("CMAKE_CUDA_COMPILER_VERSION"))
        make_program = cache_make_program(cache)
        if cuda and cuda_architectures is None and cmake_bool(cache.get("GGML_NATIVE")):
            notes.append("CMAKE_CUDA_ARCHITECTURES is not in the cache: with GGML_NATIVE=ON ggml builds "
                         "for the GPUs of the build machine ('native')")
        if not binaries:
            notes.append("no executables found in bin/, ./ or tests/: the build has not been built yet?")
    else:
        generator = None
        source_dir = root if (root / ".git").exists() else None
        cuda = True if has_cuda_library(root) else None
        cuda_architectures = cuda_flags = build_type = cuda_compiler_version = make_program = None
        lineinfo, lineinfo_source = False, None
        options = {}
        notes.append(f"no {CMAKE_CACHE}: configuration unknown, only the executables are known"
                     + ("" if cuda else "; CUDA support unknown"))

    git = None
    if source_dir is not None:
        git, why = git_state_or_why(source_dir, log_dir=log_dir, exclude=root)
        if why:
            notes.append(why)

    if check_staleness:
        staleness = check_build_staleness(
            root, generator=generator, log_dir=log_dir, targets=targets, binaries=binaries, program=make_program
        )
    else:
        staleness = not_checked("the dry run was turned off for this command")

    return BuildInfo(
        build_dir=root,
        generator=generator,
        source_dir=source_dir,
        cuda=cuda,
        cuda_architectures=cuda_architectures,
        cuda_flags=cuda_flags,
        lineinfo=lineinfo,
        build_type=build_type,
        options=MappingProxyType(dict(options)),
        binaries=MappingProxyType(dict(binaries)),
        git=git,
        staleness=staleness,
        cache_path=cache_path if has_cache else None,
        lineinfo_source=lineinfo_source,
        cuda_compiler_version=cuda_compiler_version,
        notes=tuple(notes),
        make_program=make_program,
    )
