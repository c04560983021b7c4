"""A scratch CMake build kept between runs: configure once, then compile only the named sources.

A compile-time defect (D7) shows in one translation unit failing, not in a library
being built: configuring the user's source tree with the entry's options and
compiling the objects of the sources the entry names costs one TU instead of
hundreds. The folder lives under ``$KVDIAG_HOME/scratch-builds`` and is keyed by
(source tree, commit, options, compiler launcher), so the next run with the same
key skips the configure and ninja finds the object current. ninja's own
dependency tracking (depfiles, the CMake regeneration rule) keeps a reused folder
honest when the tree changes under it: an edited source is recompiled, an edited
CMakeLists.txt reconfigured. The user's source tree is only read.

Ninja is the generator because it answers ``ninja -t query <source>`` with the
object a source compiles to, so no CMake-internal path layout is guessed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from kvdiag.fileio import load_json_file
from kvdiag.proc.runner import CommandNotFound, CommandResult, run_command
from kvdiag.trust import trusted_dir

SCRATCH_DIR = "scratch-builds"
STAMP = "kvdiag-configure.json"     # written after a configure that succeeded; its key is what is reused
KEEP = 4                            # scratch builds kept; older unlocked ones are removed
LAUNCHERS = ("ccache", "sccache")
NINJA_STATUS = "[%f/%t] "           # ninja's default, pinned: the progress display reads `[n/m]`

OutputCallback = Callable[[str, str], None]


@dataclass(frozen=True)
class KeptBuildKey:
    """What a scratch build folder is for: a configure is reused only for the same key."""

    source_dir: Path
    commit: str | None                       # None: no git state; ninja's depfiles still track edits
    defines: tuple[tuple[str, str], ...]     # the -D options, sorted
    launcher: str | None                     # ccache / sccache as compiler launcher, when present

    @classmethod
    def make(cls, source_dir: Path, commit: str | None, defines: Mapping[str, str],
             launcher: str | None) -> "KeptBuildKey":
        return cls(Path(source_dir).resolve(), commit, tuple(sorted((str(k), str(v)) for k, v in defines.items())),
                   launcher)

    def to_dict(self) -> dict:
        return {"source_dir": str(self.source_dir), "commit": self.commit, "defines": dict(self.defines),
                "launcher": self.launcher}

    def folder_name(self) -> str:
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()
        return f"{(self.commit or 'nogit')[:12]}-{digest[:12]}"


def compiler_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """ccache or sccache on PATH (ccache first), to put in front of the compilers."""
    path = (environ if environ is not None else os.environ).get("PATH", os.defpath)
    for name in LAUNCHERS:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def configure_argv(key: KeptBuildKey, build_dir: Path, ninja: str = "ninja") -> list[str]:
    argv = ["cmake", "-S", str(key.source_dir), "-B", str(build_dir), "-G", "Ninja"]
    if os.path.isabs(ninja):     # a chosen ninja, by path: the one that builds what it configures
        argv.append(f"-DCMAKE_MAKE_PROGRAM={ninja}")
    argv += [f"-D{name}={value}" for name, value in key.defines]
    if key.launcher:
        argv += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={key.launcher}" for lang in ("C", "CXX", "CUDA")]
    return argv


def unused_variables(configure_output: str) -> list[str]:
    """The names CMake lists under "Manually-specified variables were not used by the project"."""
    lines = configure_output.splitlines()
    for i, line in enumerate(lines):
        if "Manually-specified variables were not used by the project" in line:
            names = []
            for rest in lines[i + 1:]:
                if not rest.strip():
                    if names:
                        break
                    continue
                if not rest.startswith("    "):
                    break
                names.append(rest.strip())
            return names
    return []


def parse_query(text: str) -> dict[str, list[str]]:
    """``ninja -t query`` output as {node: its outputs}."""
    nodes: dict[str, list[str]] = {}
    node, section = None, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            node, section = line[:-1], None
            nodes[node] = []
        elif line.strip() in ("input:", "outputs:", "validations:"):
            section = line.strip()
        elif node is not None and section == "outputs:" and line.startswith("    "):
            nodes[node].append(line.strip())
    return nodes


def option_definition(source_dir: Path, name: str) -> str | None:
    """Where the tree's CMake defines ``name`` (``option(NAME`` or ``set(NAME … CACHE``), as
    "path:line"; None when no CMakeLists.txt or *.cmake file does. Build folders (a
    CMakeCache.txt inside) and .git are not searched."""
    pattern = re.compile(rf"^\s*(option\s*\(\s*{re.escape(name)}\b|set\s*\(\s*{re.escape(name)}\b.*\bCACHE\b)",
                         re.I | re.M)
    for root, dirs, files in os.walk(source_dir):
        if "CMakeCache.txt" in files and Path(root) != Path(source_dir):
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for fname in sorted(files):
            if fname != "CMakeLists.txt" and not fname.endswith(".cmake"):
                continue
            path = Path(root) / fname
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            match = pattern.search(text)
            if match:
                line = text.count("\n", 0, match.start()) + 1
                return f"{path.relative_to(source_dir)}:{line}"
    return None


@dataclass
class KeptBuildRun:
    """What one use of a scratch build did. ``stopped`` says why no build ran (and ``verdict``
    which one that calls for); otherwise the last result is the build's."""

    build_dir: Path
    reused: bool = False
    results: list[CommandResult] = field(default_factory=list)
    objects: tuple[str, ...] = ()
    stopped: str | None = None
    verdict: str | None = None            # "not-applicable" | "skipped" | "inconclusive" with `stopped`

    def stop(self, verdict: str, reason: str) -> "KeptBuildRun":
        self.verdict, self.stopped = verdict, reason
        return self

    @property
    def timed_out(self) -> bool:
        return any(r.timed_out for r in self.results)


class KeptBuild:
    """One kept scratch build folder and the commands that use it. ``ninja`` is the ninja that
    configures (CMAKE_MAKE_PROGRAM, when a path) and builds it; PATH's by default."""

    def __init__(self, root: Path, key: KeptBuildKey, ninja: str = "ninja"):
        self.root = Path(root)
        self.key = key
        self.path = self.root / key.folder_name()
        self.ninja = ninja

    # ------------------------------------------------------------------ state

    def configured(self) -> bool:
        """A configure with this key succeeded here and its build.ninja is still there."""
        try:
            stamp = load_json_file(self.path / STAMP)
        except (OSError, ValueError):
            return False
        return stamp.get("key") == self.key.to_dict() and (self.path / "build.ninja").is_file()

    def unused(self) -> list[str]:
        try:
            return list(load_json_file(self.path / STAMP).get("unused", []))
        except (OSError, ValueError, AttributeError):
            return []

    def mark_configured(self, unused: Sequence[str]) -> None:
        tmp = self.path / (STAMP + ".tmp")
        tmp.write_text(json.dumps({"key": self.key.to_dict(), "unused": list(unused),
                                   "configured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                  indent=2) + "\n")
        os.replace(tmp, self.path / STAMP)

    @contextmanager
    def locked(self, deadline: float) -> Iterator[bool]:
        """Hold the folder against another kvdiag using it; yields False if not had by ``deadline``."""
        trusted_dir(self.root, "scratch-build folder", "point KVDIAG_HOME at a folder of your own")
        with open(self.root / f"{self.path.name}.lock", "a+") as fh:
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.2)
            try:
                yield True
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    # ------------------------------------------------------------------ use

    def compile_sources(self, sources: Sequence[str], *, log_dir: Path, name: str, deadline: float,
                        required_options: Sequence[str] = (), on_output: OutputCallback | None = None,
                        say: Callable[[str], None] | None = None, cancel=None) -> KeptBuildRun:
        """Configure if needed, find the objects of ``sources`` (paths relative to the source
        tree), build only those (``ninja -k 0``: every object, every error). Commands get
        what is left until ``deadline`` (monotonic); CommandInterrupted propagates."""
        run = KeptBuildRun(self.path)
        say = say or (lambda text: None)
        with self.locked(deadline) as have:
            if not have:
                return run.stop("inconclusive", f"another kvdiag run held the scratch build {self.path} "
                                                "until the step's budget ran out")
            try:
                return self._compile(run, sources, log_dir, name, deadline, required_options, on_output, say,
                                     cancel)
            except CommandNotFound as exc:
                return run.stop("skipped", f"{exc} (a compile step needs cmake, ninja and the CUDA compiler)")
            finally:
                prune(self.root, keep=KEEP, current=self.path.name)

    def _compile(self, run, sources, log_dir, name, deadline, required_options, on_output, say, cancel):
        def command(argv, suffix, output=None):
            left = deadline - time.monotonic()
            if left < 1:
                return None
            result = run_command(argv, timeout=left, log_dir=log_dir, name=f"{name}-{suffix}", on_output=output,
                                 env_overrides={"NINJA_STATUS": NINJA_STATUS}, cancel=cancel)
            run.results.append(result)
            return result

        if self.configured():
            run.reused = True
            unused = self.unused()
            say(f"scratch build configured earlier, reused: {self.path}")
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            say(f"configuring the scratch build {self.path}")
            result = command(configure_argv(self.key, self.path, self.ninja), "configure", on_output)
            if result is None:
                return run.stop("inconclusive", "the step's budget was spent before the configure")
            if not result.ok:
                if result.timed_out or result.interrupted:
                    return run
                return run.stop("inconclusive", f"the scratch configure failed ({result.describe()}): "
                                                f"{_first_cmake_error(result.combined_text())}")
            unused = unused_variables(result.stderr_text()) or unused_variables(result.combined_text())
            self.mark_configured(unused)
        ignored = [o for o in required_options if o in unused]
        if ignored:
            return run.stop("not-applicable", f"the source tree's CMake does not use {', '.join(ignored)} "
                                              "(cmake: Manually-specified variables were not used by the project)")
        absolute = [str(self.key.source_dir / s) for s in sources]
        result = command([self.ninja, "-C", str(self.path), "-t", "query", *absolute], "objects")
        if result is None:
            return run.stop("inconclusive", "the step's budget was spent before the build")
        outputs = parse_query(result.stdout_text())
        if not result.ok or set(outputs) != set(absolute):
            missing = [s for s, a in zip(sources, absolute) if a not in outputs]
            return run.stop("not-applicable", f"with these options the configured project does not compile "
                                              f"{', '.join(missing) or 'the named sources'} (ninja -t query: "
                                              f"{_last_line(result.combined_text())})")
        run.objects = tuple(o for a in absolute for o in outputs[a] if o.endswith((".o", ".obj")))
        say(f"compiling {len(run.objects)} object(s): {', '.join(Path(o).name for o in run.objects)}")
        result = command([self.ninja, "-C", str(self.path), "-k", "0", *run.objects], "build", on_output)
        if result is None:
            return run.stop("inconclusive", "the step's budget was spent before the build")
        return run


def prune(root: Path, *, keep: int, current: str) -> list[str]:
    """Remove scratch builds beyond the ``keep`` most recently configured (never ``current``,
    never one another kvdiag holds). Returns the names removed."""
    folders = [p for p in Path(root).iterdir() if p.is_dir() and p.name != current] if Path(root).is_dir() else []
    folders.sort(key=lambda p: (p / STAMP).stat().st_mtime if (p / STAMP).exists() else 0, reverse=True)
    removed = []
    for folder in folders[max(keep - 1, 0):]:
        with open(Path(root) / f"{folder.name}.lock", "a+") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def _first_cmake_error(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("CMake Error"):
            detail = " ".join(x.strip() for x in lines[i + 1:i + 4] if x.strip())
            return f"{line.strip()} {detail}".strip()
    return _last_line(text)


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else "no output"
