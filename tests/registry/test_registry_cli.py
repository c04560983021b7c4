"""The registry through the command line: lint, list, show and export, as a user meets them."""

from __future__ import annotations

import json
import re

import pytest

from kvdiag.cli import main
from kvdiag.exitcodes import ExitCode


def test_lint_of_the_real_registry_exits_zero(capsys):
    assert main(["registry", "lint"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "23 entries, no problems"


def test_lint_of_a_bad_registry_exits_65_with_one_line_per_problem(capsys, registry_fixtures):
    rc = main(["--registry", str(registry_fixtures / "bad" / "missing-required"), "registry", "lint"])
    assert rc == ExitCode.DATA == 65
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["D1.md: defect.severity: required key is missing"]
    assert "1 problem(s)" in captured.err


def test_lint_of_the_good_fixture_exits_zero(capsys, registry_fixtures):
    assert main(["--registry", str(registry_fixtures / "good"), "registry", "lint"]) == 0
    assert "2 entries, no problems" in capsys.readouterr().out


def test_list_shows_the_good_entries_when_one_is_malformed(capsys, registry_fixtures):
    rc = main(["--registry", str(registry_fixtures / "mixed"), "list"])
    captured = capsys.readouterr()
    ids = re.findall(r"^(D\d+)\s", captured.out, flags=re.M)
    assert ids == ["D1", "D3"]
    assert "D2.md: (file): TOML does not parse" in captured.err
    assert rc == ExitCode.DATA


def test_list_of_the_real_registry(capsys):
    assert main(["list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["id"] for item in listed] == [f"D{n}" for n in range(1, 24)]


def test_list_filters_by_status_and_tool(capsys):
    assert main(["list", "--status", "fix-pending", "--tool", "synccheck", "--format", "json"]) == 0
    assert [item["id"] for item in json.loads(capsys.readouterr().out)] == ["D2"]
    assert main(["list", "--status", "open", "--tool", "synccheck", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("option, value", [("--status", "bogus"), ("--tool", "memchek")])
def test_a_filter_no_entry_can_have_is_a_usage_error_not_an_empty_table(capsys, option, value):
    """A misspelt status or tool would otherwise print an empty table and exit 0, as if no entry matched."""
    assert main(["list", option, value]) == ExitCode.USAGE == 64
    captured = capsys.readouterr()
    assert captured.out == "" and f"Invalid value for '{option}'" in captured.err


def test_show_unknown_id_is_a_usage_error_naming_close_ids(capsys):
    rc = main(["show", "D99"])
    assert rc == ExitCode.USAGE == 64
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert "D99" in lines[0] and "closest:" in lines[0] and "D9" in lines[0]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("entry_id", [f"D{n}" for n in range(1, 24)])
def test_show_renders_every_entry(capsys, entry_id):
    assert main(["show", entry_id.lower()]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{entry_id} — ")
    assert "## Root cause" in out


def _export(capsys, *args: str) -> list[dict]:
    assert main(["registry", "export", "--format", "osv", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_osv_export_has_one_record_per_entry(capsys):
    records = _export(capsys)
    assert [r["id"] for r in records] == [f"KVDIAG-D{n}" for n in range(1, 24)]


def test_osv_export_is_structurally_valid(capsys):
    rfc3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
    records = _export(capsys)
    ranges_seen = 0
    for record in records:
        assert re.fullmatch(r"KVDIAG-D\d+", record["id"])
        assert rfc3339.match(record["modified"]) and rfc3339.match(record["published"])
        assert isinstance(record["summary"], str) and record["summary"]
        assert all(isinstance(a, str) for a in record["aliases"])
        assert all(r.startswith("KVDIAG-D") for r in record["related"])
        for ref in record["references"]:
            assert ref["type"] in {"ADVISORY", "ARTICLE", "DETECTION", "DISCUSSION", "REPORT", "FIX",
                                   "INTRODUCED", "GIT", "PACKAGE", "EVIDENCE", "WEB"}
            assert ref["url"].startswith("https://")
        for affected in record["affected"]:
            assert affected["ranges"], record["id"]
            for rng in affected["ranges"]:
                ranges_seen += 1
                assert rng["type"] == "GIT"
                assert rng["repo"].startswith("https://")
                events = rng["events"]
                assert events and all(len(e) == 1 for e in events)
                assert "introduced" in events[0]
                assert all(set(e) <= {"introduced", "fixed", "last_affected", "limit"} for e in events)
    assert ranges_seen >= 3


def test_osv_export_of_the_fixed_negative_control(capsys):
    """ggml's fix and llama.cpp's own commit of it (ggml synced it from llama.cpp #24011)."""
    (d11,) = _export(capsys, "D11")
    ggml, llama = d11["affected"]
    (rng,) = ggml["ranges"]
    assert rng["repo"] == "https://github.com/ggml-org/ggml"
    assert rng["events"] == [{"introduced": "0"}, {"fixed": "da7d1472dcd5bb6e415fd39b571cc8506c9e2b07"}]
    (rng,) = llama["ranges"]
    assert rng["repo"] == "https://github.com/ggml-org/llama.cpp"
    assert rng["events"] == [{"introduced": "0"}, {"fixed": "85f99dca8b4539163e6858c9df7c9e8b0ad3632a"}]
    assert d11["database_specific"]["status"] == "fixed"
