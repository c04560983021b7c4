"""How the user's build made one program: its compile and link commands, read from ninja.

A probe that changes only a test program's own source (``tests/test-backend-ops.cpp``)
does not need a scratch build of the whole tree: compiling that one file and relinking
it against the libraries the build already made gives the same program with the probe
in it, in seconds instead of minutes. The commands are the build's own, exactly as
``ninja -t commands`` lists them (compiler, launcher, defines, include paths, flags,
rpath, libraries), with three substitutions: the source file, the object and the
program are kvdiag's copies. Nothing is written into the build folder.

Only ninja builds are read (a CMake Makefiles build keeps its commands in per-target
``flags.make``/``link.txt`` files that need make's variable expansion); anything else
is a reason, and the caller runs the plain program.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvdiag.proc.runner import CommandNotFound, run_command

NINJA_TIMEOUT_S = 60.0
_DEPFILE_FLAGS = ("-MD", "-MMD")
_DEPFILE_ARGS = ("-MT", "-MF", "-MQ")
_OBJECT_SUFFIXES = (".o", ".obj")


class RecipeUnavailable(Exception):
    """The build's commands for the program cannot be read; the message says why."""


@dataclass(frozen=True)
class ProgramRecipe:
    """The two commands that made ``output`` (both run in ``build_dir``)."""

    build_dir: Path
    output: str                  # as ninja names it, relative to build_dir (bin/test-backend-ops)
    source: Path                 # the translation unit compiled into the program's object
    obj: str                     # its object, as the commands name it
    compile: tuple[str, ...]
    link: tuple[str, ...]

    def compile_into(self, source: Path, obj: Path) -> tuple[str, ...]:
        """The compile command for another copy of the source, writing another object.

        Depfile options are dropped (no ninja reads them here) and the original source's
        folder is added to the quoted-include path, so that an ``#include "x.h"`` resolved
        next to the original file still resolves."""
        out: list[str] = []
        args = list(self.compile)
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in _DEPFILE_FLAGS:
                i += 1
                continue
            if arg in _DEPFILE_ARGS:
                i += 2
                continue
            if arg == "-o" and i + 1 < len(args):
                out += ["-o", str(obj)]
                i += 2
                continue
            if arg == "-c" and i + 1 < len(args):
                out += ["-iquote", str(self.source.parent), "-c", str(source)]
                i += 2
                continue
            out.append(arg)
            i += 1
        return tuple(out)

    def link_into(self, obj: Path, program: Path, extra: Sequence[str] = ()) -> tuple[str, ...]:
        """The link command with kvdiag's object and program in place of the build's."""
        out: list[str] = []
        args = list(self.link)
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-o" and i + 1 < len(args):
                out += ["-o", str(program)]
                i += 2
                continue
            out.append(str(obj) if arg == self.obj else arg)
            i += 1
        return tuple(out) + tuple(extra)

    def link_inputs(self) -> tuple[Path, ...]:
        """The libraries and objects the link reads from the build (for a cache key)."""
        found = []
        for arg in self.link:
            if arg == self.obj or arg.startswith("-"):
                continue
            path = Path(arg) if Path(arg).is_absolute() else self.build_dir / arg
            if ".so" in path.name or path.suffix in (".a",) + _OBJECT_SUFFIXES:
                found.append(path)
        return tuple(found)

    def to_dict(self) -> dict:
        return {"build_dir": str(self.build_dir), "output": self.output, "source": str(self.source),
                "object": self.obj, "compile": list(self.compile), "link": list(self.link)}


def command_segments(line: str) -> list[list[str]]:
    """One ninja command line as its ``&&``-separated commands, each as argv, without the
    ``:`` no-ops CMake wraps link commands in (``: && c++ … && :``)."""
    try:
        tokens = shlex.split(line)
    except ValueError:
        return []
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            segments.append([])
        else:
            segments[-1].append(token)
    return [s for s in segments if s and s != [":"]]


def _value_after(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args[:-1]):
        if arg == flag:
            return args[i + 1]
    return None


def parse_recipe(commands_text: str, build_dir: Path, output: str) -> ProgramRecipe:
    """The link command of ``output`` and the compile command of the object it links whose
    source is the program's own ``<name>.cpp``, from ``ninja -t commands <output>``."""
    segments = [seg for line in commands_text.splitlines() for seg in command_segments(line)]
    link = next((s for s in reversed(segments) if _value_after(s, "-o") == output), None)
    if link is None:
        raise RecipeUnavailable(f"ninja lists no command that writes {output}")
    objects = {a for a in link if a.endswith(_OBJECT_SUFFIXES)}
    wanted = Path(output).name + ".cpp"
    for seg in segments:
        obj, source = _value_after(seg, "-o"), _value_after(seg, "-c")
        if obj in objects and source and Path(source).name == wanted:
            src = Path(source) if Path(source).is_absolute() else build_dir / source
            return ProgramRecipe(build_dir=build_dir, output=output, source=src, obj=obj,
                                 compile=tuple(seg), link=tuple(link))
    raise RecipeUnavailable(f"ninja lists no compile command of {wanted} among the objects of {output}")


def read_recipe(build_dir: Path, binary: Path, *, log_dir: Path) -> ProgramRecipe:
    """Ask the build's ninja how it made ``binary``; RecipeUnavailable with the reason otherwise."""
    if not (build_dir / "build.ninja").is_file():
        raise RecipeUnavailable(f"{build_dir} is not a ninja build (no build.ninja): only ninja builds list "
                                "their commands")
    try:
        output = str(binary.resolve().relative_to(build_dir.resolve()))
    except ValueError:
        raise RecipeUnavailable(f"{binary} is not inside {build_dir}") from None
    try:
        result = run_command(["ninja", "-C", str(build_dir), "-t", "commands", output], timeout=NINJA_TIMEOUT_S,
                             log_dir=log_dir, name="ninja-commands")
    except CommandNotFound as exc:
        raise RecipeUnavailable(f"ninja is not available: {exc}") from None
    if not result.ok:
        raise RecipeUnavailable(f"ninja -t commands {output}: {result.describe()}")
    return parse_recipe(result.stdout_text(), build_dir, output)
