"""The loader builds each entry's `[applies]`, `[requires]`, `[scan]` and `[drift]` as typed sections
beside the raw table the linter checked: every key the schema names becomes an attribute (lists as
tuples), the table as written stays for `kvdiag show`, and an absent table is false."""

from __future__ import annotations

import pytest

from kvdiag.registry.loader import load_registry
from kvdiag.registry.schema import SECTIONS
from kvdiag.registry.sections import Applies, DriftSpec, Requires, ScanSpec, from_table

TYPES = {"applies": Applies, "requires": Requires, "scan": ScanSpec, "drift": DriftSpec}


@pytest.fixture(scope="module")
def entries():
    return load_registry().require_entries()


@pytest.mark.parametrize("name", TYPES)
def test_every_key_the_schema_names_is_an_attribute_or_a_note(name):
    attributes = {f for f in TYPES[name].__dataclass_fields__} - {"table"}
    assert set(SECTIONS[name].keys) - {"note"} == attributes


@pytest.mark.parametrize("name", TYPES)
def test_each_entrys_sections_are_typed_and_keep_the_table_as_written(entries, name):
    for entry in entries:
        section = getattr(entry, name)
        raw = entry.raw.get(name)
        if raw is None and name in ("scan", "drift"):
            assert section is None
            continue
        assert isinstance(section, TYPES[name]) and dict(section.items()) == dict(raw or {})
        assert bool(section) == bool(raw)
        for key, value in (raw or {}).items():
            if key != "note":
                assert getattr(section, key) == (tuple(value) if isinstance(value, list) else value), (entry.id, key)


def test_defaults_of_keys_left_out():
    requires = from_table(Requires, {"gpu": True, "binaries": ["test-backend-ops"]})
    assert requires.gpu and requires.binaries == ("test-backend-ops",)
    assert not requires.sanitizer and requires.env == () and requires.model_keys == ()
    scan = from_table(ScanSpec, {"step": "fast", "op": "FLASH_ATTN_EXT", "params": "hsk=256"})
    assert scan.print_limit is None and scan.sanitizer_options is None    # the step's own
    drift = from_table(DriftSpec, {"op": "FLASH_ATTN_EXT", "params": ".*", "runs": 3})
    assert (drift.confirm_min_fails, drift.confirm_min_err, drift.seeds) == (1, 0.0, ())
    assert not Applies() and Applies().cmake_values == {}


def test_every_matcher_key_the_schema_names_is_an_attribute():
    from kvdiag.registry.entry import Matcher

    assert set(SECTIONS["signature"].keys) == set(Matcher.__dataclass_fields__) - {"fields"}


def test_each_matcher_holds_its_table_as_attributes(entries):
    for entry in entries:
        for matcher, table in zip(entry.signature, entry.raw["signature"]):
            assert dict(matcher.fields) == dict(table)
            assert all(getattr(matcher, key) == value for key, value in table.items()), (entry.id, table)
