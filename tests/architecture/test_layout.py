"""The layout shows the architecture: no import cycles, no oversized module or function
without a stated reason. Read from the source with ``ast`` (see layout.py)."""

from __future__ import annotations

import layout


def test_no_package_depends_on_itself_through_another():
    """engine, controls, store, report…: the package graph is one-way (imports inside
    functions count, so a cycle cannot hide in a deferred import)."""
    assert layout.cycles(layout.package_graph()) == []


def test_no_module_import_cycle():
    assert layout.cycles(layout.module_graph()) == []


def test_the_graph_reader_sees_a_cycle(tmp_path, monkeypatch):
    """The check can fail: two modules importing each other, one from inside a function."""
    pkg = tmp_path / "kvdiag"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for folder in (pkg, pkg / "a", pkg / "b"):
        (folder / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from kvdiag.b.two import thing\n")
    (pkg / "b" / "two.py").write_text("def thing():\n    from kvdiag.a import one\n")
    monkeypatch.setattr(layout, "PACKAGE", pkg)
    assert layout.cycles(layout.package_graph()) == [["kvdiag.a", "kvdiag.b"]]
    assert layout.cycles(layout.module_graph()) == [["kvdiag.a.one", "kvdiag.b.two"]]


def test_no_module_or_function_is_oversized_without_a_reason():
    assert [str(o) for o in layout.oversized()] == []


def test_a_size_reason_must_sit_where_the_reader_looks(tmp_path, monkeypatch):
    pkg = tmp_path / "kvdiag"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(layout.MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def long():\n{body}\n\n# size: a table kept whole\ndef kept():\n{body}")
    monkeypatch.setattr(layout, "PACKAGE", pkg)
    assert [o.where for o in layout.oversized()] == ["kvdiag/long.py:1 long()"]


def test_only_the_process_layer_starts_processes():
    """Every external command (the server too) goes through kvdiag.proc: nothing else imports
    subprocess or sh."""
    outside = {m: libs for m, libs in layout.process_importers().items() if not m.startswith("kvdiag.proc.")}
    assert outside == {}


def test_every_error_reported_to_the_user_is_defined_in_one_module():
    """kvdiag.errors holds every KvdiagError and the exit code each means."""
    assert layout.error_classes_outside_errors_module() == []
