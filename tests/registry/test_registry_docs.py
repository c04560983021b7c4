"""docs/registry.md documents the schema as it is: every section, every key, every closed value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvdiag.registry import schema
from kvdiag.registry.lint import MATCHER_KEYS


@pytest.fixture(scope="module")
def doc():
    return (Path(__file__).resolve().parents[2] / "docs" / "registry.md").read_text(encoding="utf-8")


def _section_text(doc: str, name: str, many: bool) -> str:
    header = f"### `[[{name}]]`" if many else f"### `[{name}]`"
    start = doc.find(header)
    assert start >= 0, f"no heading {header}"
    end = doc.find("\n## ", start)
    nxt = doc.find("\n### ", start + 1)
    ends = [e for e in (end, nxt) if e > 0]
    return doc[start: min(ends) if ends else len(doc)]


@pytest.mark.parametrize("name", sorted(schema.SECTIONS))
def test_every_key_of_every_section_is_documented(doc, name):
    section = schema.SECTIONS[name]
    text = _section_text(doc, name, section.many)
    for key, spec in section.keys.items():
        row = re.search(rf"^\| `{re.escape(key)}` \|.*$", text, flags=re.M)
        assert row, f"[{name}].{key} is not documented"
        assert ("required" in row.group(0)) is spec.required, f"[{name}].{key}: required-ness differs"
        for value in spec.enum:
            assert f"`{value}`" in text, f"[{name}].{key}: value {value!r} not documented"


def test_template_names_and_matcher_keys_are_documented(doc):
    for name in schema.TEMPLATE_GLOBALS:
        assert f"`{name}" in doc, name
    matchers = doc[doc.index("\n## Signature matchers"):]
    matchers = matchers[: matchers.index("\n## ", 1)]
    for matcher, keys in MATCHER_KEYS.items():
        row = re.search(rf"^\| `{matcher}` \|.*$", matchers, flags=re.M)
        assert row, matcher
        for key in keys:
            assert f"`{key}`" in row.group(0), (matcher, key)
    for kind in schema.FINDING_KINDS + schema.ABORT_KINDS:
        assert f"`{kind}`" in doc, kind


def test_lint_usage_and_exit_code_are_documented(doc):
    assert "kvdiag registry lint" in doc and "65" in doc
    assert "registry/EXAMPLE.md" in doc
