"""A test program with a probe in it, made by recompiling one file and relinking it.

Why not a scratch worktree and build, like fix verification? A fix changes the
library, so the library must be rebuilt (minutes on the device). A probe that only
changes the test program's own source (``test-backend-ops-launch``) needs one
translation unit compiled and the program relinked against the libraries the user's
build already made: the build's own compile and link commands
(:mod:`kvdiag.workspace.program_recipe`), its source file copied and patched in
kvdiag's scratch area, the object and program written there too. The user's build
folder and source tree are only read.

The program is kept under ``$KVDIAG_HOME/probe-programs/<key>/`` where the key
covers the commands, the patch, the source text and the size and time of every
library the link reads: a second scan of the same build reuses it, a rebuilt
library makes a new one. Anything that fails is a reason the caller reports,
running the plain program instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kvdiag.fileio import write_json
from kvdiag.home import home_folder
from kvdiag.probes.patch import Probe
from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.workspace.program_recipe import ProgramRecipe, RecipeUnavailable, read_recipe

COMPILE_TIMEOUT_S = 900.0
LINK_TIMEOUT_S = 300.0
GIT_TIMEOUT_S = 60.0
# The launch probe's interposers must be found by the dynamic linker ahead of libcudart's:
# GNU ld exports a symbol an input library references, but not every linker looks that deep.
LINK_EXTRA = ("-rdynamic", "-ldl")
PROGRAMS_DIR = "probe-programs"
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ProbeProgram:
    """The outcome: a program to run, or why there is none."""

    probe: str
    path: Path | None = None
    reused: bool = False
    why_not: str | None = None
    seconds: float = 0.0
    recipe: dict = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        if self.path is None:
            return f"no {self.probe} program: {self.why_not}"
        how = "reused" if self.reused else f"built in {self.seconds:.1f} s"
        return f"{self.probe} program {how}: {self.path}"

    def to_dict(self) -> dict:
        return {"probe": self.probe, "path": str(self.path) if self.path else None, "reused": self.reused,
                "why_not": self.why_not, "seconds": round(self.seconds, 3)}


def program_key(recipe: ProgramRecipe, probe: Probe) -> str:
    """What the program depends on: the commands, the patch, the source and the libraries."""
    digest = hashlib.sha256()
    for part in (*recipe.compile, "\0", *recipe.link, "\0", probe.path.read_text(encoding="utf-8")):
        digest.update(part.encode())
    digest.update(recipe.source.read_bytes())
    for path in recipe.link_inputs():
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def probe_program(build_dir: Path, binary: Path, probe: Probe, *, home: Path, log_dir: Path) -> ProbeProgram:
    """The probe's build of ``binary`` (kept, or made now); never raises for a build that cannot do it."""
    import time

    started = time.monotonic()
    try:
        recipe = read_recipe(build_dir, binary, log_dir=log_dir)
        key = program_key(recipe, probe)
    except (RecipeUnavailable, OSError) as exc:
        return ProbeProgram(probe.name, why_not=str(exc))
    folder = home_folder(home, PROGRAMS_DIR) / key      # checked like the home (kvdiag.trust): programs run from it
    program = folder / Path(recipe.output).name
    with _LOCK:   # a scan's workers and a sweep's entries ask at once: one of them builds
        if _usable(program):
            return ProbeProgram(probe.name, path=program, reused=True, recipe=recipe.to_dict())
        why = _make(recipe, probe, folder, program, log_dir)
    if why is not None:
        return ProbeProgram(probe.name, why_not=why, seconds=time.monotonic() - started, recipe=recipe.to_dict())
    return ProbeProgram(probe.name, path=program, seconds=time.monotonic() - started, recipe=recipe.to_dict())


def _usable(program: Path) -> bool:
    return program.is_file() and os.access(program, os.X_OK)


def _make(recipe: ProgramRecipe, probe: Probe, folder: Path, program: Path, log_dir: Path) -> str | None:
    """Copy, patch, compile, link into ``folder``; the reason on failure (the folder is then removed)."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    tree = staging / "src"
    touched = [path for path, is_new in probe.touched_files() if not is_new]
    if len(touched) != 1 or Path(touched[0]).name != recipe.source.name:
        return f"probe {probe.name} must patch exactly {recipe.source.name}, it touches {touched}"
    patched = tree / touched[0]
    patched.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(recipe.source, patched)
    obj = staging / (Path(recipe.output).name + ".o")
    steps = (
        (["git", "-C", str(tree), "init", "-q"], GIT_TIMEOUT_S, "probe-program-git-init", None),
        (["git", "-C", str(tree), "apply", "--whitespace=nowarn", str(probe.path.resolve())], GIT_TIMEOUT_S,
         "probe-program-apply", None),
        (list(recipe.compile_into(patched, obj)), COMPILE_TIMEOUT_S, "probe-program-compile", recipe.build_dir),
        (list(recipe.link_into(obj, staging / program.name, LINK_EXTRA)), LINK_TIMEOUT_S, "probe-program-link",
         recipe.build_dir),
    )
    for argv, timeout, name, cwd in steps:
        try:
            result = run_command(argv, timeout=timeout, log_dir=log_dir, name=name, cwd=cwd)
        except CommandNotFound as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return f"{name}: {exc}"
        if not result.ok:
            shutil.rmtree(staging, ignore_errors=True)
            tail = result.combined_text().strip().splitlines()[-3:]
            return f"{name} failed ({result.describe()}): {' | '.join(tail)}"
    write_json(staging / "program.json", {"probe": probe.name, "recipe": recipe.to_dict()})
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, folder)
    return None
