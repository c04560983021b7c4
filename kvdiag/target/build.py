"""What the user's build is: its CMake configuration, its binaries, its sources, and
whether it is current with them (the D13 check every verdict carries).

Every external command (git, ninja, make, the test program) goes through
:func:`kvdiag.proc.runner.run_command`; nothing here calls ``subprocess``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvdiag.errors import UsageError
from kvdiag.proc.runner import CommandNotFound, run_command

CMAKE_CACHE = "CMakeCache.txt"
STALENESS_TIMEOUT_S = 60.0
GIT_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 30.0
MAX_LISTED = 20

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
_CUDA_OPTIONS = ("GGML_CUDA", "LLAMA_CUDA", "LLAMA_CUBLAS", "GGML_CUBLAS")
_CUDA_LIB = re.compile(r"^(lib)?ggml-cuda\.(so(\.\d+)*|dll|dylib)$", re.I)
_LINEINFO_FLAGS = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")
_CACHE_LINE = re.compile(
    r'^(?:"(?P<qkey>[^"]*)"|(?P<key>[^:="]+))(?::(?P<type>[A-Za-z]+))?=(?P<value>.*)$'
)
_NINJA_EDGE = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\]\s?(?P<desc>.*)$")
_UNKNOWN_TARGET = re.compile(r"unknown target '(?P<t>[^']+)'|No rule to make target '(?P<m>[^']+)'")
_MAKE_STEP = re.compile(r'"(?P<msg>(?:Building|Linking|Generating)\b[^"]*)"\s*$')
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class GitState:
    """The git state of a build's source directory."""

    commit: str
    short: str
    describe: str | None
    dirty: bool
    dirty_files: tuple[str, ...]  # porcelain lines' paths, at most MAX_LISTED
    branch: str | None  # None when HEAD is detached
    dirty_count: int = 0  # all changed/untracked paths, of which dirty_files lists the first ones

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "short": self.short,
            "describe": self.describe,
            "dirty": self.dirty,
            "dirty_files": list(self.dirty_files),
            "dirty_count": self.dirty_count,
            "branch": self.branch,
        }


@dataclass(frozen=True)
class Staleness:
    """Is the build current with its sources? ``stale`` is None when unknown."""

    checked: bool
    stale: bool | None
    tool: str | None  # "ninja -n" | "make -n" | "make -q"
    pending: tuple[str, ...]  # what would be rebuilt, at most MAX_LISTED lines
    detail: str
    pending_count: int = 0  # all build steps that would run

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "stale": self.stale,
            "tool": self.tool,
            "pending": list(self.pending),
            "pending_count": self.pending_count,
            "detail": self.detail,
        }


def _not_checked(detail: str, tool: str | None = None) -> Staleness:
    return Staleness(checked=False, stale=None, tool=tool, pending=(), detail=detail)


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
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- CMake cache


def parse_cmake_cache(text: str) -> dict[str, str]:
    """``KEY:TYPE=VALUE`` lines of a CMakeCache.txt as {KEY: VALUE}; comments skipped."""
    entries: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("//") or line.startswith("#"):
            continue
        m = _CACHE_LINE.match(line)
        if not m:
            continue
        key = m.group("qkey") if m.group("qkey") is not None else m.group("key").strip()
        value = m.group("value")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]  # CMake quotes values with significant trailing spaces
        entries[key] = value
    return entries


def read_cmake_cache(path: Path) -> dict[str, str]:
    try:
        return parse_cmake_cache(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def cmake_bool(value: str | None) -> bool:
    """CMake's truth: ON/YES/TRUE/Y/non-zero number; OFF/NO/FALSE/N/IGNORE/NOTFOUND/*-NOTFOUND/'' are false."""
    if value is None:
        return False
    v = value.strip().upper()
    if v in ("ON", "YES", "TRUE", "Y"):
        return True
    if v in ("", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND") or v.endswith("-NOTFOUND"):
        return False
    try:
        return float(v) != 0
    except ValueError:
        return False


def _flag_tokens(flags: str) -> list[str]:
    try:
        return shlex.split(flags)
    except ValueError:
        return flags.split()


def lineinfo_in_flags(flags: str | None) -> str | None:
    """The flag of ``flags`` that gives device line information, or None."""
    if not flags:
        return None
    for token in _flag_tokens(flags):
        if token in _LINEINFO_FLAGS:
            return token
    return None


def _nonempty(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def _source_dir(cache: Mapping[str, str]) -> Path | None:
    home = _nonempty(cache.get("CMAKE_HOME_DIRECTORY"))
    if home:
        return Path(home)
    project = _nonempty(cache.get("CMAKE_PROJECT_NAME"))
    if project and _nonempty(cache.get(f"{project}_SOURCE_DIR")):
        return Path(cache[f"{project}_SOURCE_DIR"].strip())
    for key, value in cache.items():
        if key.endswith("_SOURCE_DIR") and _nonempty(value):
            return Path(value.strip())
    return None


def _lineinfo(cache: Mapping[str, str], build_type: str | None) -> tuple[bool, str | None]:
    keys = ["CMAKE_CUDA_FLAGS"]
    if build_type:
        keys.append(f"CMAKE_CUDA_FLAGS_{build_type.upper()}")
    for key in keys:
        flag = lineinfo_in_flags(cache.get(key))
        if flag:
            return True, f"{key}: {flag}"
    if cmake_bool(cache.get("GGML_CUDA_DEBUG")):
        return True, "GGML_CUDA_DEBUG=ON (adds -lineinfo)"
    return False, None


def _options(cache: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in cache.items()
        if (k.startswith("GGML_") or k.startswith("LLAMA_")) and "-" not in k
    }


# --------------------------------------------------------------------------- binaries


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


def _has_cuda_library(build_dir: Path) -> bool:
    for sub in ("bin", ".", "lib", "lib64"):
        directory = build_dir if sub == "." else build_dir / sub
        if directory.is_dir():
            try:
                if any(_CUDA_LIB.match(p.name) for p in directory.iterdir()):
                    return True
            except OSError:
                continue
    return False


# --------------------------------------------------------------------------- git


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def git_state(source_dir: Path, *, log_dir: Path, exclude: Path | None = None) -> GitState | None:
    """The git state of ``source_dir``, or None when it is not in a git work tree (or git is missing).

    ``exclude``: a directory (the build dir) whose untracked files do not make the tree dirty.
    Untracked files do count otherwise: ggml globs ``*.cu``, so a new file is built.
    """
    state, _ = _git_state(source_dir, log_dir=log_dir, exclude=exclude)
    return state


def _git(args: Sequence[str], source_dir: Path, log_dir: Path, name: str):
    return run_command(
        ["git", "-C", str(source_dir), *args],
        timeout=GIT_TIMEOUT_S,
        log_dir=log_dir,
        name=name,
        env_overrides=_GIT_ENV,
    )


def _git_state(source_dir: Path, *, log_dir: Path, exclude: Path | None) -> tuple[GitState | None, str | None]:
    if not source_dir.is_dir():
        return None, f"source dir {source_dir} does not exist here: no git state"
    try:
        head = _git(["rev-parse", "HEAD"], source_dir, log_dir, "git-rev-parse-head")
    except CommandNotFound as exc:
        return None, f"git not found: no git state ({exc})"
    if head.returncode != 0 or head.timed_out:
        why = _first_line(head.combined_text()) or head.describe()
        return None, f"{source_dir} is not a git checkout with a commit: {why}"
    commit = head.stdout_text().strip()
    short_r = _git(["rev-parse", "--short", "HEAD"], source_dir, log_dir, "git-rev-parse-short")
    short = short_r.stdout_text().strip() if short_r.returncode == 0 else commit[:12]
    desc_r = _git(["describe", "--tags", "--always", "--dirty"], source_dir, log_dir, "git-describe")
    describe = (desc_r.stdout_text().strip() or None) if desc_r.returncode == 0 else None

    status_args = ["status", "--porcelain", "--untracked-files=normal"]
    if exclude is not None:
        try:
            rel = exclude.resolve().relative_to(source_dir.resolve())
        except ValueError:
            rel = None
        if rel is not None and rel.parts:
            status_args += ["--", ".", f":(exclude){rel.as_posix()}"]
    status_r = _git(status_args, source_dir, log_dir, "git-status")
    changed: list[str] = []
    if status_r.returncode == 0:
        for line in status_r.stdout_text().splitlines():
            if len(line) > 3:
                changed.append(line[3:])
    dirty = bool(changed) or (describe is not None and describe.endswith("-dirty"))

    branch_r = _git(["symbolic-ref", "--short", "-q", "HEAD"], source_dir, log_dir, "git-branch")
    branch = (branch_r.stdout_text().strip() or None) if branch_r.returncode == 0 else None
    return (
        GitState(
            commit=commit,
            short=short,
            describe=describe,
            dirty=dirty,
            dirty_files=tuple(changed[:MAX_LISTED]),
            branch=branch,
            dirty_count=len(changed),
        ),
        None,
    )


# --------------------------------------------------------------------------- staleness


def _rel_target(build_dir: Path, path: Path) -> str:
    try:
        return path.relative_to(build_dir).as_posix()
    except ValueError:
        return str(path)


def _dry_run(
    tool: str,
    make_argv,  # (targets) -> argv
    targets: list[str],
    *,
    auto_targets: bool,
    log_dir: Path,
    env_overrides: Mapping[str, str],
):
    """Run a dry-run, dropping targets the tool does not know when they were guessed.

    Returns (result, targets used, dropped targets) or raises CommandNotFound.
    """
    dropped: list[str] = []
    attempt = 0
    while True:
        attempt += 1
        result = run_command(
            make_argv(targets),
            timeout=STALENESS_TIMEOUT_S,
            log_dir=log_dir,
            name=f"staleness-{tool.split()[0]}" + (f"-{attempt}" if attempt > 1 else ""),
            env_overrides=dict(env_overrides),
        )
        if result.timed_out or result.returncode in (0, None) or not auto_targets or attempt > 5:
            return result, targets, dropped
        unknown = [m.group("t") or m.group("m") for m in _UNKNOWN_TARGET.finditer(result.combined_text())]
        unknown = [u for u in unknown if u in targets]
        if not unknown:
            return result, targets, dropped
        dropped += unknown
        targets = [t for t in targets if t not in unknown]
        # with no known target left, fall back on the default target


def _ninja_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path) -> Staleness:
    tool = "ninja -n"
    try:
        result, used, dropped = _dry_run(
            tool,
            lambda ts: ["ninja", "-C", str(build_dir), "-n", *ts],
            targets,
            auto_targets=auto,
            log_dir=log_dir,
            env_overrides={"NINJA_STATUS": "[%f/%t] ", "LC_ALL": "C"},
        )
    except CommandNotFound as exc:
        return _not_checked(f"ninja not found, build currency unknown: {exc}", tool)
    if result.timed_out:
        return _not_checked(f"ninja -n timed out after {STALENESS_TIMEOUT_S:g} s", tool)
    text = result.combined_text()
    if result.returncode != 0:
        errors = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
        why = errors[0] if errors else (_first_line(text) or result.describe())
        return _not_checked(f"ninja -n failed: {why}", tool)
    edges = []
    for line in result.stdout_text().splitlines():
        m = _NINJA_EDGE.match(line.strip())
        if m:
            edges.append(m.group("desc").strip())
    scope = _scope(used, dropped)
    if not edges:
        return Staleness(checked=True, stale=False, tool=tool, pending=(),
                         detail=f"ninja: no work to do ({scope})")
    if any(e.startswith("Re-running CMake") for e in edges):
        detail = (f"build.ninja would be regenerated (CMake re-run) before anything else; "
                  f"the steps after that are not listed ({scope})")
    else:
        detail = f"{len(edges)} build step(s) would run ({scope})"
    return Staleness(checked=True, stale=True, tool=tool, pending=tuple(edges[:MAX_LISTED]),
                     detail=detail, pending_count=len(edges))


def _scope(used: Sequence[str], dropped: Sequence[str]) -> str:
    scope = "targets " + ", ".join(used) if used else "default target"
    if dropped:
        scope += "; not build targets: " + ", ".join(dropped)
    return scope


def _cmake_make_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path) -> Staleness:
    # `make -q` cannot answer for CMake Makefiles: their top-level targets are .PHONY, so it
    # always says "out of date". A dry run prints, without running them, the
    # cmake_echo_color commands announcing each step ("Building CUDA object ...").
    tool = "make -n"
    try:
        result, used, dropped = _dry_run(
            tool,
            lambda ts: ["make", "-n", "--no-print-directory", "-C", str(build_dir), *ts],
            targets,
            auto_targets=auto,
            log_dir=log_dir,
            env_overrides={"LC_ALL": "C"},
        )
    except CommandNotFound as exc:
        return _not_checked(f"make not found, build currency unknown: {exc}", tool)
    if result.timed_out:
        return _not_checked(f"make -n timed out after {STALENESS_TIMEOUT_S:g} s", tool)
    if result.returncode != 0:
        text = result.combined_text()
        errors = [ln.strip() for ln in text.splitlines() if "***" in ln or "error" in ln.lower()]
        why = errors[0] if errors else (_first_line(text) or result.describe())
        return _not_checked(f"make -n failed: {why}", tool)
    steps = []
    for line in result.stdout_text().splitlines():
        if "cmake_echo_color" not in line:
            continue
        m = _MAKE_STEP.search(line.strip())
        if m:
            steps.append(m.group("msg"))
    scope = _scope(used, dropped)
    if not steps:
        return Staleness(checked=True, stale=False, tool=tool, pending=(),
                         detail=f"make: nothing to rebuild ({scope}; CMakeLists edits are not seen by a dry run)")
    return Staleness(checked=True, stale=True, tool=tool, pending=tuple(steps[:MAX_LISTED]),
                     detail=f"{len(steps)} build step(s) would run ({scope})", pending_count=len(steps))


def _plain_make_staleness(build_dir: Path, targets: list[str], auto: bool, log_dir: Path) -> Staleness:
    tool = "make -q"
    try:
        result, used, dropped = _dry_run(
            tool,
            lambda ts: ["make", "-q", "-C", str(build_dir), *ts],
            targets,
            auto_targets=auto,
            log_dir=log_dir,
            env_overrides={"LC_ALL": "C"},
        )
    except CommandNotFound as exc:
        return _not_checked(f"make not found, build currency unknown: {exc}", tool)
    if result.timed_out:
        return _not_checked(f"make -q timed out after {STALENESS_TIMEOUT_S:g} s", tool)
    scope = _scope(used, dropped)
    if result.returncode == 0:
        return Staleness(checked=True, stale=False, tool=tool, pending=(), detail=f"make -q: up to date ({scope})")
    if result.returncode == 1:
        return Staleness(checked=True, stale=True, tool=tool, pending=(),
                         detail=f"make -q: out of date ({scope})")
    why = _first_line(result.combined_text()) or result.describe()
    return _not_checked(f"make -q failed: {why}", tool)


def check_build_staleness(
    build_dir: Path,
    *,
    generator: str | None,
    log_dir: Path,
    targets: Sequence[str] = (),
    binaries: Mapping[str, Path] | None = None,
) -> Staleness:
    """Would building ``targets`` (or the binaries found) run anything? Never raises for tool trouble."""
    binaries = binaries or {}
    auto = not targets
    is_cmake = generator is not None
    gen = generator or ""
    if gen.startswith("Ninja") or (not is_cmake and (build_dir / "build.ninja").is_file()):
        wanted = list(targets) or sorted(_rel_target(build_dir, p) for p in binaries.values())
        if not (build_dir / "build.ninja").is_file():
            return _not_checked(f"no build.ninja in {build_dir}: build currency unknown", "ninja -n")
        return _ninja_staleness(build_dir, wanted, auto, log_dir)
    if is_cmake and gen.endswith("Makefiles") and not gen.startswith("NMake"):
        if not (build_dir / "Makefile").is_file():
            return _not_checked(f"no Makefile in {build_dir}: build currency unknown", "make -n")
        wanted = list(targets) or sorted(binaries)
        return _cmake_make_staleness(build_dir, wanted, auto, log_dir)
    if not is_cmake and any((build_dir / n).is_file() for n in ("Makefile", "makefile", "GNUmakefile")):
        wanted = list(targets) or sorted(_rel_target(build_dir, p) for p in binaries.values())
        return _plain_make_staleness(build_dir, wanted, auto, log_dir)
    if is_cmake:
        return _not_checked(f"generator {generator!r} has no dry run kvdiag knows: build currency unknown")
    return _not_checked("no CMake cache, build.ninja or Makefile: build currency unknown")


# --------------------------------------------------------------------------- inspect


def inspect_build(
    build_dir: Path,
    *,
    log_dir: Path,
    check_staleness: bool = True,
    targets: Sequence[str] = (),
) -> BuildInfo:
    """Describe the build in ``build_dir``. UsageError when it is not a build at all."""
    given = Path(build_dir).expanduser()
    if not given.exists():
        raise UsageError(f"build directory {given} does not exist")
    if not given.is_dir():
        raise UsageError(f"build directory {given} is not a directory")
    root = given.resolve()
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)

    cache_path = root / CMAKE_CACHE
    has_cache = cache_path.is_file()
    binaries = find_binaries(root)
    if not has_cache and not binaries:
        raise UsageError(f"{given} is not a build directory: no {CMAKE_CACHE} and no executables in bin/, ./ or tests/")

    notes: list[str] = []
    if has_cache:
        cache = read_cmake_cache(cache_path)
        generator = _nonempty(cache.get("CMAKE_GENERATOR"))
        source_dir = _source_dir(cache)
        cuda: bool | None = any(cmake_bool(cache.get(k)) for k in _CUDA_OPTIONS)
        cuda_architectures = _nonempty(cache.get("CMAKE_CUDA_ARCHITECTURES"))
        cuda_flags = cache.get("CMAKE_CUDA_FLAGS")
        cuda_flags = cuda_flags.strip() if cuda_flags is not None else None
        build_type = _nonempty(cache.get("CMAKE_BUILD_TYPE"))
        lineinfo, lineinfo_source = _lineinfo(cache, build_type)
        options = _options(cache)
        cuda_compiler_version = _nonempty(cache.get("CMAKE_CUDA_COMPILER_VERSION"))
        if cuda and cuda_architectures is None and cmake_bool(cache.get("GGML_NATIVE")):
            notes.append("CMAKE_CUDA_ARCHITECTURES is not in the cache: with GGML_NATIVE=ON ggml builds "
                         "for the GPUs of the build machine ('native')")
        if not binaries:
            notes.append("no executables found in bin/, ./ or tests/: the build has not been built yet?")
    else:
        generator = None
        source_dir = root if (root / ".git").exists() else None
        cuda = True if _has_cuda_library(root) else None
        cuda_architectures = cuda_flags = build_type = cuda_compiler_version = None
        lineinfo, lineinfo_source = False, None
        options = {}
        notes.append(f"no {CMAKE_CACHE}: configuration unknown, only the executables are known"
                     + ("" if cuda else "; CUDA support unknown"))

    git = None
    if source_dir is not None:
        git, why = _git_state(source_dir, log_dir=log_dir, exclude=root)
        if why:
            notes.append(why)

    if check_staleness:
        staleness = check_build_staleness(
            root, generator=generator, log_dir=log_dir, targets=targets, binaries=binaries
        )
    else:
        staleness = _not_checked("not checked (disabled)")

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
    )


# --------------------------------------------------------------------------- test-backend-ops


@dataclass(frozen=True)
class BackendOpsInfo:
    """What a ``test-backend-ops`` binary supports, read from its usage text."""

    path: Path
    help_text: str
    has_seed: bool
    has_test_file: bool
    has_parallel_jobs: bool
    modes: tuple[str, ...]
    ops: tuple[str, ...]  # from --list-ops when it has it; () otherwise
    has_list_ops: bool = False
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "has_seed": self.has_seed,
            "has_test_file": self.has_test_file,
            "has_parallel_jobs": self.has_parallel_jobs,
            "has_list_ops": self.has_list_ops,
            "modes": list(self.modes),
            "ops": list(self.ops),
            "notes": list(self.notes),
            "help_text": self.help_text,
        }


_OP_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_modes(help_text: str) -> tuple[str, ...]:
    """Mode names from the usage text: the ``valid modes:`` list, or the old one-line form."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if "valid modes are" in low:  # "valid modes are: test (...) or perf (...)"
            rest = re.sub(r"\([^()]*\)", " ", line.split(":", 1)[-1])
            return tuple(w for w in re.findall(r"[A-Za-z_]+", rest) if w.lower() not in ("or", "and"))
        if "valid modes" in low:
            modes = []
            for item in lines[i + 1:]:
                m = re.match(r"^\s*[-*]\s*([A-Za-z_][\w-]*)", item)
                if not m:
                    break
                modes.append(m.group(1))
            return tuple(modes)
    return ()


def parse_ops_list(text: str) -> tuple[str, ...]:
    """Op names printed by ``--list-ops``: lines of upper-case names; headers and totals skipped."""
    ops: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or ":" in line:
            continue
        tokens = [t for t in re.split(r"[\s,]+", line) if t]
        if tokens and all(_OP_NAME.match(t) for t in tokens):
            for t in tokens:
                if t not in ops:
                    ops.append(t)
    return tuple(ops)


def probe_help(binary: Path, *, log_dir: Path, name: str) -> str | None:
    """A binary's ``--help`` text (any exit code); None when it printed nothing or hung."""
    result = run_command([str(binary), "--help"], timeout=PROBE_TIMEOUT_S, log_dir=Path(log_dir), name=name)
    text = result.combined_text()
    return text if text.strip() and not result.timed_out else None


def probe_backend_ops(binary: Path, *, log_dir: Path) -> BackendOpsInfo:
    """Run ``test-backend-ops --help`` (any exit code) and ``--list-ops`` when the help mentions it."""
    binary = Path(binary)
    if not binary.is_file():
        raise UsageError(f"test-backend-ops not found at {binary}")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    result = run_command([str(binary), "--help"], timeout=PROBE_TIMEOUT_S, log_dir=log_dir,
                         name="backend-ops-help")
    help_text = result.combined_text()
    if result.timed_out:
        notes.append(f"--help timed out after {PROBE_TIMEOUT_S:g} s")
    if not help_text.strip():
        notes.append(f"--help printed nothing ({result.describe()})")

    has_list_ops = bool(re.search(r"--list-ops\b", help_text))
    ops: tuple[str, ...] = ()
    if has_list_ops:
        listing = run_command([str(binary), "--list-ops"], timeout=PROBE_TIMEOUT_S, log_dir=log_dir,
                              name="backend-ops-list-ops")
        if listing.returncode == 0 and not listing.timed_out:
            ops = parse_ops_list(listing.stdout_text())
            if not ops:
                notes.append("--list-ops printed no op names")
        else:
            notes.append(f"--list-ops failed: {listing.describe()}")

    return BackendOpsInfo(
        path=binary,
        help_text=help_text,
        has_seed=bool(re.search(r"--seed\b", help_text)),
        has_test_file=bool(re.search(r"--test-file\b", help_text)),
        has_parallel_jobs=bool(re.search(r"(?<![\w-])-j\b|--jobs\b", help_text)),
        modes=parse_modes(help_text),
        ops=ops,
        has_list_ops=has_list_ops,
        notes=tuple(notes),
    )
