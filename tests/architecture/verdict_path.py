"""A verdict's path through the engine, counted from the code's calls (issue #42).

Read with ``ast`` (nothing is imported): starting from one function, every call the code
makes to a function of the package is followed, depth first and in source order, each
function once. Only the calls that hand the entry on are followed (``entries``, ``entry``
and whatever a call receives them as, or a value computed from them), because that is
the entry's path; calls through an object (``store.create``) cannot be resolved
statically and are not followed. The modules of ``kvdiag.engine`` the walk enters, in
order, are the path; a function of another package is walked through but not counted
(it is not a room of the engine).

* a **stay** is a run of consecutive functions of one module on the path;
* a **return** is a stay in a module the path had already left;
* a **climb** is a step of the path into a module higher in the engine's import order
  (a module's height: the longest chain of engine imports below it) than the one it left.

``python3 tests/architecture/verdict_path.py [PACKAGE_DIR [module:function]]`` prints the path.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kvdiag"
START = "kvdiag.engine.run.session:run_verdicts"
FOLLOWED = ("entries", "entry")


@dataclass(frozen=True)
class EnginePath:
    modules: tuple[str, ...]          # the engine module of each function entered, in order

    @property
    def stays(self) -> list[str]:
        return [m for i, m in enumerate(self.modules) if i == 0 or self.modules[i - 1] != m]

    @property
    def rooms(self) -> int:
        return len(set(self.modules))

    @property
    def returns(self) -> int:
        return len(self.stays) - self.rooms

    def climbs(self, height: dict[str, int]) -> list[tuple[str, str]]:
        s = self.stays
        return [(a, b) for a, b in zip(s, s[1:]) if height.get(b, 0) > height.get(a, 0)]

    def by_room(self) -> "EnginePath":
        """The same path with the engine's subpackages (``verdict``, ``evidence``…) as its rooms."""
        return EnginePath(tuple(".".join(m.split(".")[:3]) for m in self.modules))


class Source:
    """Every module of the package: its functions, the names it imports, its engine imports."""

    def __init__(self, package: Path):
        self.package = package
        self.files = {}
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            self.files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in self.files.items()}

    @lru_cache(maxsize=None)
    def functions(self, module: str) -> dict[str, ast.AST]:
        found = {}
        for node in self.trees[module].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found[f"{node.name}.{item.name}"] = item
        return found

    @lru_cache(maxsize=None)
    def imported(self, module: str) -> dict[str, tuple[str, str | None]]:
        """Local name -> (module, name in it), or (module, None) for a module bound to the name."""
        found = {}
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kvdiag"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    found[a.asname or a.name] = (full, None) if full in self.files else (node.module, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in self.files:
                        found[a.asname] = (a.name, None)
        return found

    def resolve(self, module: str, name: str, seen: int = 0) -> tuple[str, str] | None:
        """Where ``name`` of ``module`` is defined (through re-exports)."""
        if module not in self.files or seen > 5:
            return None
        if name in self.functions(module):
            return module, name
        if f"{name}.__init__" in self.functions(module):
            return module, f"{name}.__init__"
        target = self.imported(module).get(name)
        if target and target[1] is not None:
            return self.resolve(target[0], target[1], seen + 1)
        return None

    def callee(self, module: str, cls: str | None, call: ast.Call) -> tuple[str, str] | None:
        f = call.func
        if isinstance(f, ast.Name):
            return self.resolve(module, f.id)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id == "self" and cls:
                return self.resolve(module, f"{cls}.{f.attr}")
            bound = self.imported(module).get(f.value.id)
            if bound and bound[1] is None:
                return self.resolve(bound[0], f.attr)
        return None

    @lru_cache(maxsize=None)
    def engine_heights(self, depth: int = 0) -> dict[str, int]:
        """Each engine module's height in the engine's import order (with ``depth`` 3, each
        subpackage's, from the imports between subpackages)."""
        def name(m: str) -> str:
            return ".".join(m.split(".")[:depth]) if depth else m

        engine = {name(m) for m in self.files if m.startswith("kvdiag.engine.")}
        deps = {}
        for m in (m for m in self.files if m.startswith("kvdiag.engine.")):
            targets = set()
            for full, _ in self.imported(m).values():
                owner = name(full) if full in self.files else None
                if owner in engine and owner != name(m):
                    targets.add(owner)
            deps.setdefault(name(m), set()).update(targets)

        @lru_cache(maxsize=None)
        def height(m: str) -> int:
            return 1 + max((height(d) for d in deps[m]), default=0)

        return {m: height(m) for m in engine}


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _params(fn: ast.AST) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _calls_in_order(fn: ast.AST, followed: set[str]) -> list[tuple[ast.Call, set[str]]]:
    """The calls of a function in source order, each with the names that carry the entry then."""
    carried = set(followed)
    for node in ast.walk(fn):          # names computed from the entry carry it too
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _names_in(node.value) & carried:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            carried |= {n for t in targets for n in _names_in(t)}
        elif isinstance(node, ast.For) and _names_in(node.iter) & carried:
            carried |= _names_in(node.target)
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    return [(c, carried) for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset))]


def _handed_on(call: ast.Call, callee: ast.AST, carried: set[str]) -> set[str]:
    """The callee's parameters that receive the entry (or something computed from it)."""
    params = [p for p in _params(callee) if p not in ("self", "cls")]
    got = set()
    for i, arg in enumerate(call.args):
        if _names_in(arg) & carried and i < len(params):
            got.add(params[i])
    for kw in call.keywords:
        if kw.arg and _names_in(kw.value) & carried:
            got.add(kw.arg)
    return got


def walk(source: Source, start: str = START, followed: tuple[str, ...] = FOLLOWED) -> EnginePath:
    module, name = start.split(":")
    order: list[str] = []
    seen: set[tuple[str, str]] = set()

    def visit(mod: str, fname: str, carried: set[str]) -> None:
        if (mod, fname) in seen:
            return
        seen.add((mod, fname))
        if mod.startswith("kvdiag.engine."):
            order.append(mod)
        fn = source.functions(mod)[fname]
        cls = fname.split(".")[0] if "." in fname else None
        for call, names in _calls_in_order(fn, carried):
            target = source.callee(mod, cls, call)
            if target is None:
                continue
            handed = _handed_on(call, source.functions(target[0])[target[1]], names)
            if handed:
                visit(target[0], target[1], handed)

    visit(module, name, set(followed))
    return EnginePath(tuple(order))


def main(argv: list[str]) -> int:
    package = Path(argv[0]) if argv else PACKAGE
    start = argv[1] if len(argv) > 1 else START
    source = Source(package)
    path = walk(source, start)
    heights = source.engine_heights()
    for m in path.stays:
        print(f"  {heights.get(m, 0):2} {m}")
    print(summary(source, path))
    return 0


def summary(source: Source, path: EnginePath) -> str:
    rooms = path.by_room()
    return (f"modules: {len(path.stays)} stays in {path.rooms}, {path.returns} returns, "
            f"{len(path.climbs(source.engine_heights()))} climbs; subpackages: {len(rooms.stays)} stays in "
            f"{rooms.rooms}, {rooms.returns} returns, {len(rooms.climbs(source.engine_heights(3)))} climbs")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
