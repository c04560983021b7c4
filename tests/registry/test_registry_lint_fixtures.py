"""The linter against small registries that each break one thing (tests/fixtures/registry/bad/<what>/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvdiag.errors import DataError
from kvdiag.registry.lint import lint_registry_wide
from kvdiag.registry.loader import load_registry
from kvdiag.registry.raw import read_raw

# folder -> the exact problems expected: (file, key, fragment of the message)
BAD = {
    "unknown-key": [("D1.md", "repro[0].retries", "invalid key (known: name, kind,")],
    "bad-enum": [("D1.md", "defect.status", "'wontfix' is not one of open,")],
    "dangling-probe": [("D1.md", "probes[0].file", "dangling: probes/D1-kvdiag-fixture-missing.patch does not exist")],
    # D10.md claims id D1. The registry-wide duplicate check never sees it, because a file
    # whose id differs from its name is already dropped; the mismatch is what gets reported.
    "duplicate-id": [("D10.md", "defect.id", "'D1' does not match the file name D10.md"),
                     ("D10.md", "defect.id", "duplicate id 'D1' (also D1.md)")],
    "malformed-regex": [("D1.md", "signature[0].message", "malformed regex")],
    "undefined-template-var": [("D1.md", "repro[0].argv", "uses undefined variable 'parmas'")],
    "no-front-matter": [("D1.md", "(file)", "no ```toml front matter")],
    "toml-syntax": [("D1.md", "(file)", "TOML does not parse")],
    "missing-required": [("D1.md", "defect.severity", "required key is missing")],
    "bin-not-required": [("D1.md", "repro[0].argv", "uses bin['test-backend-ops'] but requires.binaries")],
    "exit-without-signal": [("D1.md", "signature[0]", "an exit matcher needs exactly one of signal or code")],
    "malformed-params": [("D1.md", "repro[0].vars.params", "malformed regex")],
    "datetime-not-date": [("D1.md", "defect.reported", "not a date and time")],
    "site-line-zero": [("D1.md", "location.sites", "[0].at.d99724f2: must be a line number (1 or more)")],
}

# what still loads from each bad registry
LOADS = {"duplicate-id": ["D1"]}


def test_every_bad_fixture_folder_is_covered(registry_fixtures):
    assert sorted(p.name for p in (registry_fixtures / "bad").iterdir()) == sorted(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_fixture_gives_exactly_its_problems(registry_fixtures, name):
    registry = load_registry(registry_fixtures / "bad" / name, refuse_duplicates=False)     # as lint reads it
    got = [(p.file, p.key, p.message) for p in registry.problems]
    assert len(got) == len(BAD[name]), got
    for (file, key, message), (want_file, want_key, fragment) in zip(got, BAD[name]):
        assert (file, key) == (want_file, want_key)
        assert fragment in message, message
    assert [e.id for e in registry.entries] == LOADS.get(name, [])


def test_problem_prints_as_file_key_message(registry_fixtures):
    (problem,) = load_registry(registry_fixtures / "bad" / "bad-enum").problems
    assert str(problem).startswith("D1.md: defect.status: 'wontfix' is not one of ")


def test_good_fixture_registry_loads_clean(registry_fixtures):
    registry = load_registry(registry_fixtures / "good")
    assert registry.problems == ()
    assert [e.id for e in registry.entries] == ["D1", "D2"]
    assert registry.get("d2").related == ("D1",)


def test_duplicate_ids_are_reported_by_the_registry_wide_check(registry_fixtures):
    folder = registry_fixtures / "bad" / "duplicate-id"
    raws = [read_raw(folder / "D1.md"), read_raw(folder / "D10.md")]
    (problem,) = lint_registry_wide(raws)
    assert (problem.file, problem.key) == ("D10.md", "defect.id")
    assert "duplicate id 'D1' (also D1.md)" in problem.message


def test_the_loader_refuses_two_files_with_one_id(registry_fixtures):
    folder = registry_fixtures / "bad" / "duplicate-id"
    with pytest.raises(DataError, match=r"has 2 entries with id 'D1': D1.md and D10.md \(`kvdiag registry lint`"):
        load_registry(folder)


def test_related_id_must_exist(registry_fixtures, tmp_path):
    shutil.copy(registry_fixtures / "good" / "D2.md", tmp_path / "D2.md")
    (problem,) = load_registry(tmp_path).problems
    assert (problem.file, problem.key) == ("D2.md", "defect.related")
    assert "unknown id 'D1'" in problem.message


def test_example_template_lints_clean_once_copied_to_an_entry_name(registry_dir, tmp_path):
    shutil.copy(registry_dir / "EXAMPLE.md", tmp_path / "D99.md")
    registry = load_registry(tmp_path)
    assert [str(p) for p in registry.problems] == []
    (entry,) = registry.entries
    assert entry.id == "D99" and entry.default_step.name == "fast"


def test_example_template_names_every_section(registry_dir):
    from kvdiag.registry.schema import SECTIONS

    text = registry_dir / "EXAMPLE.md"
    content = Path(text).read_text(encoding="utf-8")
    for name, section in SECTIONS.items():
        header = f"[[{name}]]" if section.many else f"[{name}]"
        assert header in content, header


@pytest.mark.parametrize("site, message", [
    ({"file": "a.cu", "holds": "x;", "near": 3}, "[0]: invalid key near (known: file, holds, anchor, at, line, commit)"),
    ({"file": "a.cu", "anchor": "if (x) {"}, "[0]: required key holds is missing"),
    ({"file": "a.cu", "holds": "x;", "anchor": " "}, "[0].anchor: must name the text the line holds"),
    ({"file": "a.cu", "holds": "x;", "at": [1538]}, "[0].at: must be a table of commit = line"),
    ({"file": "a.cu", "holds": "x;", "at": {"d99724f2": "1538"}}, "[0].at.d99724f2: must be a line number (1 or more)"),
])
def test_each_malformed_site_is_named(site, message):
    from kvdiag.registry.lint import _check_sites

    assert _check_sites([site]) == message
    assert _check_sites([{"file": "a.cu", "holds": "x;", "anchor": "if (x) {", "at": {"d99724f2": 1538}}]) is None
