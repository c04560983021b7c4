"""What a source tree and its build folder hold, asked one fact at a time.

Registry entries name facts about a tree: a file, a test, a CMake option, a
binary, a function, a construct found by its context (`target.sites`). A fork
moves and re-languages them (`tests/foo.cpp` becomes `tests/foo.py`, registered with CTest under the same
name), and a llama.cpp tree holds ggml under `ggml/` where a ggml tree holds it
at the root. Each question here answers `found`, `absent` (with what the tree has
instead, when something close exists) or `unknown` (the tree or the build that
would tell is not at hand), so a caller never mistakes "not checked" for "absent".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Mapping

from kvdiag.workspace.ctest import CTestListing, read_ctest
from kvdiag.workspace.sites import NOT_FOUND, Located, Placement, SiteSpec, locate, place

FOUND, ABSENT, UNKNOWN = "found", "absent", "unknown"
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".py")
SEARCH_ROOTS = ("ggml/src", "src", "common", "tools", "tests", "include", "ggml/include")
MAX_SCANNED_FILES = 20000


@dataclass(frozen=True)
class Answer:
    """One fact's state in this tree: where it was found, or what is there instead."""

    state: str                     # FOUND | ABSENT | UNKNOWN
    detail: str = ""               # where it was found, or why it is absent/unknown
    instead: tuple[str, ...] = ()  # near misses: what the tree has in its place

    @property
    def found(self) -> bool:
        return self.state == FOUND


def _layout_variants(rel: str) -> list[str]:
    """A path as written and as it sits in the other layout (llama.cpp keeps ggml under ggml/)."""
    rel = rel.strip("/")
    out = [rel]
    if rel.startswith("ggml/"):
        out.append(rel[len("ggml/"):])
    elif rel.split("/", 1)[0] in ("src", "include", "tests", "cmake"):
        out.append("ggml/" + rel)
    return out


@dataclass
class Tree:
    """A source tree and (optionally) a configured build folder of it."""

    source: Path | None
    build: Path | None = None
    cache: Mapping[str, str] | None = None          # CMakeCache.txt, when the build has one
    binaries: Mapping[str, Path] = field(default_factory=dict)
    commit: str | None = None                       # the tree's commit, when known
    _texts: dict = field(default_factory=dict, repr=False)   # file -> text, read once per tree

    @classmethod
    def open(cls, source: Path | None, build: Path | None = None, *, commit: str | None = None) -> "Tree":
        from kvdiag.workspace.binaries import find_binaries
        from kvdiag.workspace.cmake import read_cmake_cache

        cache = None
        binaries: dict[str, Path] = {}
        if build is not None and build.is_dir():
            if (build / "CMakeCache.txt").is_file():
                cache = read_cmake_cache(build / "CMakeCache.txt")
            binaries = find_binaries(build)
            if source is None and cache is not None and cache.get("CMAKE_HOME_DIRECTORY"):
                source = Path(cache["CMAKE_HOME_DIRECTORY"])
        if commit is None and source is not None:
            commit = _git_head(source)
        return cls(source if source is not None and source.is_dir() else None, build, cache, binaries, commit)

    @classmethod
    def from_build_info(cls, info) -> "Tree":
        """The tree of a `target.build.BuildInfo` (the engine's view of the user's build)."""
        source = info.source_dir if info.source_dir is not None and Path(info.source_dir).is_dir() else None
        cache = dict(info.options) if info.cache_path is not None else None
        commit = info.git.commit if getattr(info, "git", None) is not None else None
        return cls(source, info.build_dir, cache, dict(info.binaries), commit)

    # ------------------------------------------------------------------ files

    def path(self, rel: str) -> Path | None:
        if self.source is None:
            return None
        for variant in _layout_variants(rel):
            candidate = self.source / variant
            if candidate.exists():
                return candidate
        return None

    def file(self, rel: str) -> Answer:
        if self.source is None:
            return Answer(UNKNOWN, "no source tree given")
        found = self.path(rel)
        if found is not None:
            return Answer(FOUND, str(found.relative_to(self.source)))
        return Answer(ABSENT, f"no {rel}", self._same_stem(rel))

    def _same_stem(self, rel: str) -> tuple[str, ...]:
        """Files that differ only in their extension (a re-languaged file), and CTest tests of that stem."""
        out: list[str] = []
        for variant in _layout_variants(rel):
            where = self.source / variant
            stem = where.name.split(".")[0]
            if where.parent.is_dir():
                out += [str((where.parent / n).relative_to(self.source)) for n in sorted(os.listdir(where.parent))
                        if n.split(".")[0] == stem and n != where.name]
        test = self.ctest.get(Path(rel).name.split(".")[0]) if self.ctest.readable else None
        if test is not None:
            out.append(f"CTest test {test.name} ({_command(test.command)})")
        return tuple(dict.fromkeys(out))

    # ------------------------------------------------------------------ tests

    @cached_property
    def ctest(self) -> CTestListing:
        if self.build is None:
            return CTestListing(Path("."), {}, (), problem="no build folder given")
        return read_ctest(self.build)

    def test(self, name: str) -> Answer:
        """A test by its CTest name: registered in the build, else a tests/<name>.* source."""
        if self.ctest.readable:
            test = self.ctest.get(name)
            if test is not None:
                return Answer(FOUND, f"CTest test {name}: {_command(test.command)}")
        sources = self._test_sources(name)
        if sources:
            return Answer(FOUND, f"test source {sources[0]}" + ("" if self.ctest.readable else
                                                                f" (CTest not read: {self.ctest.problem})"))
        if self.source is None and not self.ctest.readable:
            return Answer(UNKNOWN, f"no source tree, and CTest not read: {self.ctest.problem}")
        where = []
        if self.ctest.readable:
            where.append(f"the build's CTest registers no test {name} ({len(self.ctest.tests)} tests)")
        if self.source is not None:
            where.append(f"the source tree has no tests/{name}.*")
        return Answer(ABSENT, "; ".join(where))

    def _test_sources(self, name: str) -> list[str]:
        if self.source is None:
            return []
        out = []
        for variant in _layout_variants(f"tests/{name}"):
            folder = (self.source / variant).parent
            if folder.is_dir():
                out += [str((folder / n).relative_to(self.source)) for n in sorted(os.listdir(folder))
                        if n.split(".")[0] == name and (folder / n).is_file()]
        return out

    # ------------------------------------------------------------------ CMake

    def option(self, name: str) -> Answer:
        """A CMake option: a CMakeCache.txt entry, else an option()/cache set() in the tree's CMake files."""
        if self.cache is not None and name in self.cache:
            return Answer(FOUND, f"CMakeCache.txt: {name}={self.cache[name]}")
        declared = self._declared_options().get(name)
        if declared:
            return Answer(FOUND, f"declared in {declared}")
        if self.cache is None and self.source is None:
            return Answer(UNKNOWN, "no CMakeCache.txt and no source tree")
        return Answer(ABSENT, f"no {name} in " + " or ".join(
            w for w, have in (("CMakeCache.txt", self.cache is not None), ("the tree's CMake files", self.source))
            if have))

    @cached_property
    def _cmake_files(self) -> list[Path]:
        if self.source is None:
            return []
        out = []
        for root, dirs, files in os.walk(self.source):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "vendor")]
            out += [Path(root) / f for f in files if f == "CMakeLists.txt" or f.endswith(".cmake")]
        return out

    @cached_property
    def _cmake_text(self) -> dict[Path, str]:
        return {p: _read(p) for p in self._cmake_files}

    def _declared_options(self) -> dict[str, str]:
        out: dict[str, str] = {}
        pattern = re.compile(r"^\s*(?:option|cmake_dependent_option)\s*\(\s*([A-Za-z0-9_]+)|"
                             r"^\s*set\s*\(\s*([A-Za-z0-9_]+)\s+[^)]*\bCACHE\b", re.M | re.I)
        for path, text in self._cmake_text.items():
            for m in pattern.finditer(text):
                out.setdefault(m.group(1) or m.group(2), str(path.relative_to(self.source)))
        return out

    # ------------------------------------------------------------------ binaries

    def binary(self, name: str) -> Answer:
        """A program: built in the build folder, named by its CTest, or a target of the tree's CMake files."""
        if name in self.binaries:
            return Answer(FOUND, f"built: {self.binaries[name]}")
        if self.ctest.readable:
            for test in self.ctest.tests.values():
                if test.command and Path(test.command[0]).name in (name, name + ".exe"):
                    return Answer(FOUND, f"a target of this build (CTest test {test.name} runs it; not built yet)")
        target = re.compile(rf"(?:add_executable\s*\(\s*|set\s*\(\s*(?:TARGET|TEST_TARGET)\s+){re.escape(name)}\b|"
                            rf"llama_build(?:_and_test)?\s*\(\s*{re.escape(name)}\.cpp")
        for path, text in self._cmake_text.items():
            if target.search(text):
                return Answer(FOUND, f"a target in {path.relative_to(self.source)}")
        if self.source is None and self.build is None:
            return Answer(UNKNOWN, "no build folder and no source tree")
        return Answer(ABSENT, f"not built{' and no CMake target' if self.source is not None else ''} named {name}")

    # ------------------------------------------------------------------ code

    @cached_property
    def _code_files(self) -> list[Path]:
        if self.source is None:
            return []
        out: list[Path] = []
        for top in SEARCH_ROOTS:
            base = self.source / top
            if not base.is_dir():
                continue
            for root, dirs, files in os.walk(base):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                out += [Path(root) / f for f in files if f.endswith(SOURCE_SUFFIXES)]
                if len(out) > MAX_SCANNED_FILES:
                    return out
        return list(dict.fromkeys(out))

    def _code(self, path: Path) -> str:
        if path not in self._texts:
            self._texts[path] = _read(path)
        return self._texts[path]

    def function(self, name: str, files: tuple[str, ...] = ()) -> Answer:
        """A function (or template) defined or called in the named files; else where in the tree it is."""
        if self.source is None:
            return Answer(UNKNOWN, "no source tree given")
        pattern = re.compile(rf"\b{re.escape(name)}\s*[(<]")
        named = [p for p in (self.path(f) for f in files) if p is not None and p.is_file()]
        for path in named:
            if pattern.search(self._code(path)):
                return Answer(FOUND, str(path.relative_to(self.source)))
        elsewhere = [str(p.relative_to(self.source)) for p in self._code_files if pattern.search(self._code(p))]
        if elsewhere and not named:
            return Answer(FOUND, elsewhere[0])
        read = [str(p.relative_to(self.source)) for p in named]     # as this tree names them (either layout)
        where = ", ".join(read) if read else (f"the tree (no {', '.join(files)} here)" if files else "the tree")
        return Answer(ABSENT, f"{name} not in {where}", tuple(elsewhere[:5]))

    def pattern(self, files: tuple[str, ...], pattern: str) -> Answer:
        """A regex over named files (either layout): found with the first matching line quoted, absent
        saying which files were read and which are not in the tree, unknown without a source tree."""
        if self.source is None:
            return Answer(UNKNOWN, "no source tree given")
        regex = re.compile(pattern, re.M)
        read, missing = [], []
        for rel in files:
            path = self.path(rel)
            if path is None or not path.is_file():
                missing.append(rel)
                continue
            text = self._code(path)
            m = regex.search(text)
            where = str(path.relative_to(self.source))
            if m is not None:
                line = text.count("\n", 0, m.start()) + 1
                quoted = text[text.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0].strip()
                return Answer(FOUND, f"{where}:{line}: {quoted}")
            read.append(where)
        said = [f"no line of {', '.join(read)} matches /{pattern}/"] if read else []
        said += [f"no {', '.join(missing)} in the tree"] if missing else []
        return Answer(ABSENT, "; ".join(said))

    def text(self, needle: str) -> Answer:
        """Literal text anywhere in the tree's code (e.g. a command-line flag)."""
        if self.source is None:
            return Answer(UNKNOWN, "no source tree given")
        for path in self._code_files:
            if needle in self._code(path):
                return Answer(FOUND, str(path.relative_to(self.source)))
        return Answer(ABSENT, f"no {needle!r} in the tree's code")

    def locate(self, spec: SiteSpec) -> tuple[str | None, Located | None]:
        """The site's file as this tree names it (either layout) and where in it the site is, by its
        context alone (`target.sites`); ``(None, None)`` without a source tree, ``(None, why)`` when
        the file is not there."""
        if self.source is None:
            return None, None
        path = self.path(spec.file)
        if path is None or not path.is_file():
            return None, Located(NOT_FOUND, why=f"no {spec.file}")
        return str(path.relative_to(self.source)), locate(spec, self._code(path))

    def place(self, spec: SiteSpec) -> Placement:
        """The site's line in this tree: by its context when the source is here, else the line
        recorded for this tree's commit (see `target.sites.place`)."""
        return place(spec, *self.locate(spec), self.commit)


def _command(argv) -> str:
    return " ".join(Path(a).name if i < 2 else a for i, a in enumerate(argv))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _git_head(source: Path) -> str | None:
    """HEAD's commit read from .git without running git (a plain folder has none)."""
    head = source / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            target = source / ".git" / ref[5:]
            if target.is_file():
                return target.read_text().strip()
            packed = source / ".git" / "packed-refs"
            for line in packed.read_text().splitlines() if packed.is_file() else ():
                sha, _, name = line.partition(" ")
                if name == ref[5:]:
                    return sha
            return None
        return ref or None
    except OSError:
        return None
