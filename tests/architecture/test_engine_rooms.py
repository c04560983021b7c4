"""The engine's rooms (issue #42): one subpackage per verb, held to one direction, none crowded.

The contract is ENGINE_TIERS below, read top to bottom: a module may import its own
subpackage and the tiers below its own, never a peer of its tier nor anything above.
``discover`` is reserved: the tier it will join is written down before its code comes.
"""

from __future__ import annotations

import layout

#: top to bottom; the subpackages of one tier do not import one another
ENGINE_TIERS = (
    ("sweep",),                                          # runs `run`'s entries in bulk
    ("run", "bisect", "verify", "drift", "discover"),    # the verbs
    ("scan",),                                           # a verb whose case enumeration `run` reuses
    ("verdict",),                                        # plan -> attempt -> judge, shared by every verb
    ("evidence",),                                       # observe: what an attempt left, and its matchers
)
MAX_MODULES_PER_FOLDER = 20


def tier_of(subpackage: str) -> int | None:
    return next((i for i, tier in enumerate(ENGINE_TIERS) if subpackage in tier), None)


def engine_room(module: str) -> str | None:
    """``kvdiag.engine.scan.batch`` -> ``scan``; the engine package itself has no room."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["kvdiag", "engine"] else None


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import between engine subpackages that runs sideways or back up, as `a -> b`."""
    found = []
    for module, deps in sorted(graph.items()):
        room = engine_room(module)
        if room is None:
            continue
        for dep in sorted(deps):
            other = engine_room(dep)
            if other is None or other == room:
                continue
            if tier_of(room) is None or tier_of(other) is None or tier_of(other) <= tier_of(room):
                found.append(f"{module} -> {dep}")
    return found


def crowded_folders() -> list[str]:
    """Folders of the package holding more than MAX_MODULES_PER_FOLDER modules (__init__ counts)."""
    counts: dict[str, int] = {}
    for path in layout.module_files().values():
        folder = str(path.parent.relative_to(layout.PACKAGE.parent))
        counts[folder] = counts.get(folder, 0) + 1
    return [f"{folder}: {n} modules" for folder, n in sorted(counts.items()) if n > MAX_MODULES_PER_FOLDER]


def test_every_engine_module_lives_in_a_room_of_the_contract():
    """No flat module comes back to kvdiag/engine/, and no subpackage is left out of the tiers."""
    modules = [m for m in layout.module_files() if m.startswith("kvdiag.engine.")]
    assert len(modules) > 40
    assert [m for m in modules if tier_of(engine_room(m)) is None] == []


def test_engine_subpackages_import_only_downwards():
    assert wrong_way_imports(layout.module_graph()) == []


def test_the_contract_sees_an_import_running_back_up_or_sideways(tmp_path, monkeypatch):
    """The check can fail: a judge importing the scan (from inside a function) and a bisect
    step importing verify are both named; the pipeline's downward imports are not."""
    pkg = tmp_path / "kvdiag"
    for room in ("verdict", "scan", "bisect", "verify"):
        (pkg / "engine" / room).mkdir(parents=True)
        (pkg / "engine" / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "verdict" / "judge.py").write_text("def judge():\n    from kvdiag.engine.scan.cases import x\n")
    (pkg / "engine" / "scan" / "cases.py").write_text("from kvdiag.engine.verdict.judge import judge\nx = 1\n")
    (pkg / "engine" / "bisect" / "step.py").write_text("from kvdiag.engine.verify.session import y\n")
    (pkg / "engine" / "verify" / "session.py").write_text("y = 2\n")
    monkeypatch.setattr(layout, "PACKAGE", pkg)
    assert wrong_way_imports(layout.module_graph()) == [
        "kvdiag.engine.bisect.step -> kvdiag.engine.verify.session",
        "kvdiag.engine.verdict.judge -> kvdiag.engine.scan.cases",
    ]


def test_no_folder_holds_more_than_twenty_modules():
    assert crowded_folders() == []


def test_the_count_sees_a_crowded_folder(tmp_path, monkeypatch):
    pkg = tmp_path / "kvdiag"
    (pkg / "flat").mkdir(parents=True)
    for i in range(MAX_MODULES_PER_FOLDER):
        (pkg / "flat" / f"m{i}.py").write_text("")
    (pkg / "flat" / "__init__.py").write_text("")
    monkeypatch.setattr(layout, "PACKAGE", pkg)
    assert crowded_folders() == [f"kvdiag/flat: {MAX_MODULES_PER_FOLDER + 1} modules"]


def test_every_face_names_entry_points_that_exist():
    """A face (``__init__.py`` of a room) loads its names on first use, so a name it lists
    that its module lost would only fail when asked for: each is asked for here."""
    import importlib

    faces = [m for m, p in layout.module_files().items() if p.name == "__init__.py"
             and "_EXPORTS" in p.read_text(encoding="utf-8") and "lazy_face" in p.read_text(encoding="utf-8")]
    assert len(faces) >= 9
    missing = []
    for name in faces:
        package = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in package.__all__ if not hasattr(package, n)]
    assert missing == []
