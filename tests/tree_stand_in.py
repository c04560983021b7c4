"""A stand-in tree built from a recorded listing (tests/fixtures/trees/*.json): what verify reads, no more.

Each recorded path becomes an empty file, each recorded line sits at its own line number
(blank lines between), the names of tests/ become empty files, and the CTest names and
cache values become a build folder's CTestTestfile.cmake and CMakeCache.txt. A tree asked
the registry's questions answers them as the real tree did, by construction of the
recording (tests/fixtures/trees/record_tree.py), which the tests then hold it to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

TREES = Path(__file__).resolve().parent / "fixtures" / "trees"


def listing(name: str) -> dict[str, Any]:
    return json.loads((TREES / name).read_text())


def stand_in(recorded: Mapping[str, Any], root: Path, cache: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """``(source, build)`` under ``root``; ``cache`` overrides the recorded cache values."""
    source, build = root / "src", root / "build"
    (source / "tests").mkdir(parents=True)
    for name in recorded.get("tests_dir", ()):
        (source / "tests" / name).write_text("")
    for rel in recorded.get("paths", ()):
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text("")
    for rel, lines in recorded.get("lines", {}).items():
        last = max(int(n) for n in lines)
        (source / rel).write_text("\n".join(lines.get(str(n), "") for n in range(1, last + 1)) + "\n")
    (build / "tests").mkdir(parents=True)
    (build / "CTestTestfile.cmake").write_text('subdirs("tests")\n')
    tests = [f'add_test([=[{name}]=] "/usr/bin/{cmd[0]}" ' + " ".join(f'"{source}/tests/{a}"' for a in cmd[1:]) + ")"
             for name, cmd in (recorded.get("ctest") or {}).items()]
    (build / "tests" / "CTestTestfile.cmake").write_text("\n".join(tests) + "\n")
    values = {**recorded.get("cache", {}), **(cache or {})}
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={source}\n" +
                                          "".join(f"{k}:STRING={v}\n" for k, v in values.items()))
    return source, build
