"""docs/architecture.md matches the tree: every folder it names exists (or is marked
reserved), and every package folder of kvdiag/ is named in it."""

from __future__ import annotations

import re
from pathlib import Path

import layout

DOC = layout.PACKAGE.parent / "docs" / "architecture.md"
FOLDER = re.compile(r"`(kvdiag/(?:[\w]+/)+)`")


def named_folders(text: str) -> dict[str, bool]:
    """Folder -> whether its line marks it reserved."""
    found: dict[str, bool] = {}
    for line in text.splitlines():
        for folder in FOLDER.findall(line):
            found[folder] = found.get(folder, False) or "reserved" in line
    return found


def package_folders(package: Path) -> set[str]:
    return {f"{p.parent.relative_to(package.parent)}/" for p in package.rglob("__init__.py")} - {"kvdiag/"}


def mismatches(text: str, package: Path) -> list[str]:
    named = named_folders(text)
    actual = package_folders(package)
    problems = [f"named but absent: {f}" for f, reserved in sorted(named.items())
                if not reserved and not (package.parent / f).is_dir()]
    problems += [f"named reserved but present, say what it owns: {f}" for f, reserved in sorted(named.items())
                 if reserved and (package.parent / f).is_dir()]
    problems += [f"a package the page does not name: {f}" for f in sorted(actual - set(named))]
    return problems


def test_the_architecture_page_matches_the_tree():
    assert len(named_folders(DOC.read_text(encoding="utf-8"))) > 20
    assert mismatches(DOC.read_text(encoding="utf-8"), layout.PACKAGE) == []


def test_the_check_sees_a_page_out_of_date(tmp_path):
    pkg = tmp_path / "kvdiag"
    for folder in ("engine/scan", "engine/newverb", "store"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    page = ("| `kvdiag/engine/` | x |\n| `kvdiag/engine/scan/` | y |\n| `kvdiag/store/` | z |\n"
            "| `kvdiag/engine/gone/` | moved away |\n| `kvdiag/engine/discover/` | reserved |\n")
    assert mismatches(page, pkg) == ["named but absent: kvdiag/engine/gone/",
                                     "a package the page does not name: kvdiag/engine/newverb/"]
