"""SARIF 2.1.0 output, validated against the official OASIS SARIF 2.1.0 JSON schema
(tests/fixtures/schemas/sarif-schema-2.1.0.json, see SOURCES.md there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from report_fixtures import d2_outcome, hostile_outcome, make_sweep, simple
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.report.formats import SweepFormat
from kvdiag.store.sweeps import Sweep

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "schemas" / "sarif-schema-2.1.0.json")
                    .read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)


def sarif(sweep: Sweep) -> dict:
    doc = json.loads(SweepFormat.SARIF.to_formatter().format(sweep))
    VALIDATOR.validate(doc)
    return doc


def test_the_official_schema_rejects_what_it_should() -> None:
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    good = sarif(make_sweep())
    bad_line = json.loads(json.dumps(good))
    bad_line["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    bad_level = json.loads(json.dumps(good))
    bad_level["runs"][0]["results"][0]["level"] = "fatal"
    typo = json.loads(json.dumps(good))
    typo["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startline": 3}
    for doc in (bad_line, bad_level, typo):
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(doc)


@pytest.mark.parametrize("outcomes", [None, [], "hostile"])
def test_validates_against_the_official_schema(outcomes) -> None:
    if outcomes == "hostile":
        outcomes = [d2_outcome(), hostile_outcome()]
    doc = sarif(make_sweep(outcomes))
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-schema-2.1.0.json")


def test_driver_has_one_rule_per_entry_with_the_title(sweep: Sweep) -> None:
    driver = sarif(sweep)["runs"][0]["tool"]["driver"]
    assert driver["name"] == "kvdiag" and driver["version"] == "0.1.0"
    assert [r["id"] for r in driver["rules"]] == sweep.ids
    assert driver["rules"][0]["shortDescription"]["text"] == "Divergent __syncthreads() in the MMA FlashAttention kernel"


def test_d2_site_is_a_result_at_its_repository_path_and_line(sweep: Sweep) -> None:
    run = sarif(sweep)["runs"][0]
    d2 = [r for r in run["results"] if r["ruleId"] == "D2"]
    assert len(d2) == 1
    result = d2[0]
    assert result["level"] == "error"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "D2"
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "src/ggml-cuda/fattn-mma-f16.cuh", "uriBaseId": "SRCROOT"}
    assert physical["region"] == {"startLine": 1538}
    text = result["message"]["text"]
    assert "2048 sanitizer error(s)" in text and "barrier-divergence at fattn-mma-f16.cuh:1538" in text
    assert '"Barrier error detected. Divergent thread(s) in block."' in text
    assert result["properties"]["errorCount"] == 2048


def test_a_confirmed_entry_without_a_site_is_placed_at_its_own_file(sweep: Sweep) -> None:
    d3 = [r for r in sarif(sweep)["runs"][0]["results"] if r["ruleId"] == "D3"]
    assert len(d3) == 1
    assert d3[0]["locations"] == [{"physicalLocation": {"artifactLocation": {
        "uri": "src/ggml-cuda/fattn.cu", "uriBaseId": "SRCROOT"}}}]
    assert "fattn.cu:380: fatal error" in d3[0]["message"]["text"]


def test_only_confirmed_entries_give_results_and_all_verdicts_are_in_properties(sweep: Sweep) -> None:
    run = sarif(sweep)["runs"][0]
    assert {r["ruleId"] for r in run["results"]} == {"D2", "D3"}
    assert run["properties"]["verdicts"]["D9"] == "inconclusive"
    assert run["invocations"][0]["executionSuccessful"] is False  # D11 is a kvdiag error
    assert run["invocations"][0]["startTimeUtc"] == "2026-11-29T10:00:00Z"
    clean = sarif(make_sweep([simple("D13", Verdict.NOT_REPRODUCED, "ok")]))["runs"][0]
    assert clean["results"] == [] and clean["invocations"][0]["executionSuccessful"] is True


def test_distinct_sites_across_attempts_each_give_one_result() -> None:
    site = {"site": "fattn-mma-f16.cuh:1538", "kind": "barrier-divergence", "kernel": "k", "file": "fattn-mma-f16.cuh",
            "line": 1538, "count": 20, "blocks": 1, "template_args": []}
    other = {**site, "site": "fattn-mma-f16.cuh:1602", "line": 1602}
    no_line = {**site, "site": "k+0x10", "file": None, "line": None}
    a1 = Attempt("fast", 1, Verdict.CONFIRMED, "m", Evidence(error_count=4, sites=(site, other)))
    a2 = Attempt("fast", 2, Verdict.CONFIRMED, "m", Evidence(error_count=4, sites=(site, no_line)))
    a3 = Attempt("fast", 3, Verdict.NOT_REPRODUCED, "no", Evidence(sites=({**site, "line": 9},)))
    outcome = Outcome("D2", Verdict.CONFIRMED, "2/3", (a1, a2, a3))
    results = sarif(make_sweep([outcome]))["runs"][0]["results"]
    lines = [r["locations"][0].get("physicalLocation", {}).get("region", {}).get("startLine") for r in results]
    assert lines == [1538, 1602, None]
    assert results[2]["locations"][0]["logicalLocations"][0]["name"] == "k"


def test_uris_are_percent_encoded() -> None:
    results = sarif(make_sweep([hostile_outcome()]))["runs"][0]["results"]
    assert results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "evil%3Cb%3E.cu"
