"""One-way output: only kvdiag/commands and kvdiag/cli.py print through click; the layers below return values."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvdiag"
BELOW_COMMANDS = ("engine", "store", "workspace", "proc")


def click_imports(path: Path) -> list[str]:
    """Every import of click in the module, as `file:line: name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [f"{path.name}:{node.lineno}: {n}" for n in names
                  if n == "click" or n.startswith("click.")]
    return found


def test_no_module_below_the_commands_imports_click():
    modules = [p for layer in BELOW_COMMANDS for p in sorted((PACKAGE / layer).rglob("*.py"))]
    assert len(modules) > 20
    assert [hit for m in modules for hit in click_imports(m)] == []


def test_the_check_sees_an_import_of_click(tmp_path):
    """The check itself can fail: a module that imports click, in any of the two spellings, is found."""
    sample = PACKAGE / "engine" / "verdict" / "execute.py"
    planted = tmp_path / "kvdiag" / "engine" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(sample.read_text() + "\nimport click\nfrom click.testing import CliRunner\n")
    assert [h.split(": ")[1] for h in click_imports(planted)] == ["click", "click.testing"]
    assert click_imports(sample) == []
