"""The tests a build registered with CTest, read from its CTestTestfile.cmake files.

A test's source file says little about what CTest runs: a fork can re-language a
test (`tests/foo.cpp` becomes `tests/foo.py`, run by `COMMAND Python3 … .py`) and
keep its name. The generated CTestTestfile.cmake files are the build's own list:
`add_test(NAME cmd args…)`, `set_tests_properties(NAME PROPERTIES …)` and
`subdirs("dir")`, followed recursively from the build's root, without running ctest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

TESTFILE = "CTestTestfile.cmake"
MAX_FILES = 2000            # a build tree has a few dozen; a cycle or a huge tree stops here

_COMMAND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.M)
_BRACKET = re.compile(r"\[(=*)\[(.*?)\]\1\]", re.S)


@dataclass(frozen=True)
class CTestTest:
    """One registered test: its name, the command CTest runs, and its properties."""

    name: str
    command: tuple[str, ...]
    testfile: Path
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def working_directory(self) -> str | None:
        return self.properties.get("WORKING_DIRECTORY")

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(x for x in self.properties.get("LABELS", "").split(";") if x)

    def script(self) -> str | None:
        """The file the command runs when it is an interpreter and a script (… python3 x.py)."""
        for arg in self.command[1:]:
            if re.search(r"\.(py|sh|cmake|pl|rb)$", arg):
                return arg
        return None


@dataclass(frozen=True)
class CTestListing:
    """Every test of a build, or why none could be read (``problem``)."""

    build_dir: Path
    tests: Mapping[str, CTestTest]
    files: tuple[Path, ...]
    problem: str | None = None

    @property
    def readable(self) -> bool:
        return self.problem is None

    def get(self, name: str) -> CTestTest | None:
        return self.tests.get(name)


def _tokens(args: str) -> list[str]:
    """CMake arguments: bracket arguments, quoted (with escapes) and bare words."""
    out: list[str] = []
    i, n = 0, len(args)
    while i < n:
        c = args[i]
        if c.isspace():
            i += 1
            continue
        if c == "[":
            m = _BRACKET.match(args, i)
            if m:
                out.append(m.group(2))
                i = m.end()
                continue
        if c == '"':
            j, buf = i + 1, []
            while j < n and args[j] != '"':
                if args[j] == "\\" and j + 1 < n:
                    nxt = args[j + 1]
                    buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
                    j += 2
                    continue
                buf.append(args[j])
                j += 1
            out.append("".join(buf))
            i = j + 1
            continue
        j = i
        while j < n and not args[j].isspace():
            j += 1
        out.append(args[i:j])
        i = j
    return out


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, arguments) of every call in a CTest file; comments dropped."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    calls: list[tuple[str, list[str]]] = []
    pos = 0
    while True:
        m = _COMMAND.search(text, pos)
        if not m:
            return calls
        depth, j, quote = 1, m.end(), False
        while j < len(text) and depth:
            ch = text[j]
            if ch == '"' and text[j - 1] != "\\":
                quote = not quote
            elif ch == "[" and not quote:
                b = _BRACKET.match(text, j)
                if b:
                    j = b.end()
                    continue
            elif not quote and ch == "(":
                depth += 1
            elif not quote and ch == ")":
                depth -= 1
            j += 1
        calls.append((m.group(1).lower(), _tokens(text[m.end():j - 1])))
        pos = j


def _properties(args: list[str]) -> tuple[list[str], dict[str, str]]:
    if "PROPERTIES" not in args:
        return args, {}
    at = args.index("PROPERTIES")
    names, rest = args[:at], args[at + 1:]
    return names, {rest[i]: rest[i + 1] for i in range(0, len(rest) - 1, 2)}


def read_ctest(build_dir: Path) -> CTestListing:
    """Every test registered in ``build_dir`` (following subdirs), or a listing with a problem."""
    root = Path(build_dir) / TESTFILE
    if not root.is_file():
        return CTestListing(Path(build_dir), {}, (), problem=f"no {TESTFILE} in {build_dir} "
                            "(not configured with tests, or not a CMake build folder)")
    tests: dict[str, CTestTest] = {}
    props: dict[str, dict[str, str]] = {}
    seen: list[Path] = []
    queue = [root]
    while queue and len(seen) < MAX_FILES:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.append(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return CTestListing(Path(build_dir), tests, tuple(seen), problem=f"cannot read {path}: {exc.strerror or exc}")
        for name, args in _commands(text):
            if name == "add_test" and args:
                tests[args[0]] = CTestTest(args[0], tuple(args[1:]), path)
            elif name == "set_tests_properties":
                names, values = _properties(args)
                for test in names:
                    props.setdefault(test, {}).update(values)
            elif name == "subdirs":
                queue += [(path.parent / sub / TESTFILE) for sub in args if (path.parent / sub / TESTFILE).is_file()]
    merged = {name: CTestTest(t.name, t.command, t.testfile, props.get(name, {})) for name, t in tests.items()}
    return CTestListing(Path(build_dir), merged, tuple(seen))
