"""Reading kvdiag's own source as data: its import graph and the size of its parts.

Shared by the layout tests; everything is found with ``ast`` (nothing is imported),
so a module that cannot be imported here is still measured.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kvdiag"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
SIZE_REASON = re.compile(r"^\s*#\s*size:\s*\S")


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The kvdiag modules ``path`` imports, at any depth (an import inside a function counts)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "kvdiag":
                owner = _owning_module(name, modules)
                if owner is not None:
                    found.add(owner)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module → the modules it imports. A package's ``__init__`` importing its own
    submodules (to re-export them) is the package being its contents, not a dependency."""
    modules = module_files()
    graph = {}
    for name, path in modules.items():
        deps = imports_of(path, modules) - {name}
        if path.name == "__init__.py":
            deps = {d for d in deps if not d.startswith(name + ".")}
        graph[name] = deps
    return graph


def package_of(module: str) -> str:
    """``kvdiag.engine.verdict.execute`` → ``kvdiag.engine``; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, deps in module_graph().items():
        src = package_of(module)
        graph.setdefault(src, set())
        for dep in deps:
            dst = package_of(dep)
            if dst != src and "kvdiag" not in (src, dst):
                graph[src].add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@dataclass(frozen=True)
class Oversized:
    where: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.where}: {self.lines} lines (limit {self.limit}) without a `# size: <why>` line"


def _has_reason(lines: list[str], first: int, last: int) -> bool:
    return any(SIZE_REASON.match(lines[i]) for i in range(max(first, 0), min(last, len(lines))))


def oversized() -> list[Oversized]:
    """Modules over 500 lines without a module-level ``# size:`` line, and functions over 80
    lines without one directly above their ``def`` (or its decorators) or on its first body line."""
    found = []
    for name, path in module_files().items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        function_spans = []
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            top = min([node.lineno] + [d.lineno for d in node.decorator_list])
            function_spans.append((top - 1, node.end_lineno))
            size = node.end_lineno - node.lineno + 1
            if size > MAX_FUNCTION_LINES and not _has_reason(lines, top - 2, node.body[0].lineno):
                found.append(Oversized(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}()",
                                       size, MAX_FUNCTION_LINES))
        if len(lines) > MAX_MODULE_LINES:
            in_function = {i for start, end in function_spans for i in range(start - 1, end)}
            module_reasons = [i for i, line in enumerate(lines) if SIZE_REASON.match(line) and i not in in_function]
            if not module_reasons:
                found.append(Oversized(str(path.relative_to(PACKAGE.parent)), len(lines), MAX_MODULE_LINES))
    return found


def process_importers() -> dict[str, set[str]]:
    """Module → the process-starting libraries it imports (``subprocess``, ``sh``), at any depth."""
    found: dict[str, set[str]] = {}
    for name, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            hits = roots & {"subprocess", "sh"}
            if hits:
                found.setdefault(name, set()).update(hits)
    return found


def error_classes_outside_errors_module() -> list[str]:
    """Classes deriving from one of kvdiag.errors' classes but defined elsewhere."""
    errors = module_files()["kvdiag.errors"]
    known = {n.name for n in ast.walk(ast.parse(errors.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)}
    found = []
    for name, path in module_files().items():
        if path == errors:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & known:
                    found.append(f"{name}.{node.name}")
    return found
