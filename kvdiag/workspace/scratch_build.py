"""Configuring and building a scratch tree (a probe applied, a bisect step) the way the user's build was.

kvdiag holds no build recipe of its own: a scratch tree is configured from the
user's own ``CMakeCache.txt`` (generator, build type, CUDA architectures and
flags, every GGML_*/LLAMA_* option) or with the user's ``--configure-cmd`` /
``--build-cmd``, split with ``shlex`` and never passed through a shell.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kvdiag.errors import BuildFailed, UsageError
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.progress import Progress
from kvdiag.workspace.build import read_cmake_cache

CONFIGURE_TIMEOUT_S = 1800.0
BUILD_TIMEOUT_S = 4 * 3600.0
TAIL_LINES = 30
# Cache entries never passed on: they describe the old tree and build, not the configuration.
_NOT_OPTIONS = re.compile(r"(_SOURCE_DIR|_BINARY_DIR|_IS_TOP_LEVEL)$")
_CACHE_TYPED = re.compile(r'^(?:"(?P<q>[^"]*)"|(?P<k>[^:="]+)):(?P<type>[A-Za-z]+)=')
_COMPILERS = ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_CUDA_COMPILER")


def substitute(command: str, values: Mapping[str, str]) -> list[str]:
    """``shlex.split`` a user's command, then put ``{source}``, ``{build}``, ``{jobs}`` into each argument.

    Splitting first keeps a path with spaces one argument; nothing goes through a shell.
    """
    try:
        args = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"cannot split the command {command!r}: {exc}") from None
    if not args:
        raise UsageError("an empty command was given")
    out = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


@dataclass(frozen=True)
class BuildRecipe:
    """How a scratch tree is configured and built: the user's commands or the user's own build's configuration."""

    configure_cmd: str | None = None
    build_cmd: str | None = None
    reference: Any = None                 # BuildInfo of the user's build, whose configuration is reused
    targets: tuple[str, ...] = ()
    jobs: int | None = None
    configure_timeout: float = CONFIGURE_TIMEOUT_S
    build_timeout: float = BUILD_TIMEOUT_S
    launcher: str | None = None           # ccache / sccache: put in front of the compilers of a cmake configure

    def __post_init__(self) -> None:
        if self.configure_cmd is None and self.build_cmd is None and self.reference is None:
            raise UsageError("nothing says how to build the scratch tree: give --build (reuse that build's "
                             "configuration) or --configure-cmd/--build-cmd")
        if self.configure_cmd is None and self.build_cmd is None and self.reference.cache_path is None:
            raise UsageError(f"{self.reference.build_dir} has no CMakeCache.txt to reuse: "
                             "give --configure-cmd and --build-cmd")

    def values(self, source: Path, build: Path) -> dict[str, str]:
        return {"source": str(source), "build": str(build), "jobs": str(self.jobs or os.cpu_count() or 1)}

    def configure_argv(self, source: Path, build: Path) -> list[str] | None:
        """The configure command, or None when only a build command was given."""
        if self.configure_cmd is not None:
            argv = substitute(self.configure_cmd, self.values(source, build))
        elif self.reference is None or self.reference.cache_path is None:
            return None
        else:
            argv = cmake_configure_argv(self.reference, source, build)
        return with_launcher(argv, self.launcher)

    def build_argv(self, source: Path, build: Path) -> list[str]:
        if self.build_cmd is not None:
            return substitute(self.build_cmd, self.values(source, build))
        argv = ["cmake", "--build", str(build)]
        if self.targets:
            argv += ["--target", *self.targets]
        return argv + ["-j", str(self.jobs or os.cpu_count() or 1)]


def with_launcher(argv: list[str], launcher: str | None) -> list[str]:
    """A cmake configure with ``-DCMAKE_{C,CXX,CUDA}_COMPILER_LAUNCHER=launcher`` added, unless it names a
    launcher itself or is not a cmake configure (a user's own script is left as it is)."""
    if not launcher or not argv or Path(argv[0]).name != "cmake" or "--build" in argv:
        return argv
    if any("_COMPILER_LAUNCHER" in arg for arg in argv):
        return argv
    return argv + [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in ("C", "CXX", "CUDA")]


def cache_types(cache_path: Path | None) -> dict[str, str]:
    """{KEY: TYPE} of a CMakeCache.txt (INTERNAL and STATIC entries are not options)."""
    if cache_path is None:
        return {}
    types: dict[str, str] = {}
    try:
        text = Path(cache_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    for line in text.splitlines():
        m = _CACHE_TYPED.match(line.strip())
        if m:
            types[m.group("q") if m.group("q") is not None else m.group("k").strip()] = m.group("type").upper()
    return types


def cmake_configure_argv(build, source: Path, scratch: Path) -> list[str]:
    """``cmake -S source -B scratch`` with the user's build's own configuration (from its CMakeCache)."""
    argv = ["cmake", "-S", str(source), "-B", str(scratch)]
    if build.generator:
        argv += ["-G", build.generator]
    cache = read_cmake_cache(build.cache_path) if build.cache_path is not None else {}
    if build.build_type:
        argv.append(f"-DCMAKE_BUILD_TYPE={build.build_type}")
    if build.cuda_architectures:
        argv.append(f"-DCMAKE_CUDA_ARCHITECTURES={build.cuda_architectures}")
    if build.cuda_flags:
        argv.append(f"-DCMAKE_CUDA_FLAGS={build.cuda_flags}")
    for key in _COMPILERS:
        value = (cache.get(key) or "").strip()
        if value and not value.endswith("-NOTFOUND"):
            argv.append(f"-D{key}:FILEPATH={value}")
    types = cache_types(build.cache_path)
    for key, value in sorted(build.options.items()):
        kind = types.get(key)
        if _NOT_OPTIONS.search(key) or kind in ("INTERNAL", "STATIC"):
            continue
        # With its type: an untyped relative PATH value (GGML_BIN_INSTALL_DIR=bin) would be made
        # absolute against cmake's working directory.
        argv.append(f"-D{key}:{kind}={value}" if kind else f"-D{key}={value}")
    return argv


@dataclass(frozen=True)
class BuildTimes:
    configure_s: float | None = None
    build_s: float | None = None


def build_tree(recipe: BuildRecipe, source: Path, build: Path, *, log_dir: Path, label: str,
               progress: Progress | None = None, times: dict[str, float] | None = None) -> BuildTimes:
    """Configure (when there is a configure command) and build; BuildFailed with the log's tail on failure.

    ``times`` gets the seconds of each phase as it ends, a failed one included."""
    build.mkdir(parents=True, exist_ok=True)
    progress = progress or Progress()
    times = times if times is not None else {}
    steps = [("configure", recipe.configure_argv(source, build), recipe.configure_timeout),
             ("build", recipe.build_argv(source, build), recipe.build_timeout)]
    for phase, argv, timeout in steps:
        if argv is None:
            continue
        progress.say(f"{label}: {phase}: {shlex.join(argv[:8])}{' …' if len(argv) > 8 else ''}")
        started = time.monotonic()
        progress.start(f"{label}: {phase}", budget_s=timeout)
        try:
            result = run_command(argv, timeout=timeout, log_dir=log_dir, name=f"{label}-{phase}", cwd=source,
                                 on_output=progress.line)
        except CommandNotFound as exc:
            raise BuildFailed(phase, None, f"{label}: cannot {phase}: {exc}") from None
        except CommandInterrupted:
            raise KeyboardInterrupt from None
        finally:
            progress.stop()
        times[phase] = time.monotonic() - started
        if not result.ok:
            tail = [ln for ln in result.combined_text().splitlines() if ln.strip()][-TAIL_LINES:]
            raise BuildFailed(phase, result, f"{label}: {phase} failed ({result.describe()}): {shlex.join(argv)}",
                              tail)
    return BuildTimes(times.get("configure"), times.get("build"))
