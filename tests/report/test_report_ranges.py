"""Every format that shows verdict evidence shows the affected range's evidence too.

The sweep: D2 confirmed inside its range, D11 inconclusive before its fix (no F16 case in that
era's test-backend-ops), D8 not-applicable outside its range, D13 without a range (a build defect).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from report_fixtures import d2_outcome, make_sweep, simple
from kvdiag.records.verdict import Verdict
from kvdiag.records.ranges import RangeEvidence, RangeFinding
from kvdiag.records.sweep import SweepOutcome
from kvdiag.report.formats import SweepFormat
from kvdiag.report.run_text import render_outcome
from kvdiag.store.sweeps import Sweep

HEAD = "e25a32e98c15a1118a976685af0f4d2c1f380079"
LLAMA = "https://github.com/ggml-org/llama.cpp"
D11_RANGE = RangeEvidence("affected", "introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98", HEAD,
                          f"llama.cpp (remote {LLAMA})",
                          (RangeFinding(LLAMA, "affected", "introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98"),))
D11_REASON = ("present by range, not exercised by this build's tests: no CONCAT test case matches /type=f16/ in this "
              "build (0 cases); affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98); "
              "would exercise it: a CONCAT case matching /type=f16/; probe D11-f16-concat-cases adds such cases")
D8_RANGE = RangeEvidence("unaffected", "this tree is llama.cpp; the entry records the defect only in BeeLlama fork",
                         HEAD, f"llama.cpp (remote {LLAMA})")


def ranged(outcome, evidence):
    from dataclasses import replace

    return replace(outcome, range=evidence)


@pytest.fixture
def sweep() -> Sweep:
    return ranged_sweep()


def ranged_sweep() -> Sweep:
    d2 = ranged(d2_outcome(), RangeEvidence("affected", "introduced 0208355f4 is an ancestor of e25a32e98, no fix "
                                                        "recorded", HEAD))
    d11 = ranged(simple("D11", Verdict.INCONCLUSIVE, D11_REASON), D11_RANGE)
    d8 = ranged(simple("D8", Verdict.NOT_APPLICABLE, "no FLASH_ATTN_EXT test case matches /q2_0s/ (0 cases)"), D8_RANGE)
    d13 = ranged(simple("D13", Verdict.NOT_REPRODUCED, "the build is current with its sources"),
                 RangeEvidence("none", "the entry names no affected range: a build or toolchain defect, not a commit "
                                       "of a repository"))
    return make_sweep([d2, d11, d8, d13])


def test_the_table_has_a_range_column_and_a_line_per_placed_entry(sweep):
    lines = SweepFormat.TABLE.to_formatter().format(sweep).splitlines()
    header = next(line for line in lines if line.startswith("id "))
    assert header.split()[:4] == ["id", "verdict", "k/N", "range"]
    first = lines.index(header) + 2
    rows = lines[first:lines.index("", first)]
    cells = {line.split()[0]: line.split()[1:4] for line in rows}
    assert cells == {"D2": ["confirmed", "1/1", "affected"], "D11": ["inconclusive", "0/1", "affected"],
                     "D8": ["not-applicable", "-", "unaffected"], "D13": ["not-reproduced", "0/1", "none"]}
    assert lines[-3:] == [
        "D2 range: affected by range (introduced 0208355f4 is an ancestor of e25a32e98, no fix recorded)",
        "D11 range: affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)",
        "D8 range: outside the range (this tree is llama.cpp; the entry records the defect only in BeeLlama fork)"]


def test_markdown_and_html_show_the_range_beside_the_reason(sweep):
    md = SweepFormat.MARKDOWN.to_formatter().format(sweep)
    assert "| [D11](#d11) | inconclusive | 0/1 | affected |" in md
    assert "range: affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)" in md
    html = SweepFormat.HTML.to_formatter().format(sweep)
    assert '<p class="range">range: affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)</p>' \
        in html
    assert '<td title="outside the range (this tree is llama.cpp; the entry records the defect only in BeeLlama ' \
           'fork)">unaffected</td>' in html


def test_json_keeps_the_range_and_reads_it_back(sweep):
    data = json.loads(SweepFormat.JSON.to_formatter().format(sweep))
    d11 = next(o for o in data["outcomes"] if o["entry"] == "D11")
    assert d11["range"]["status"] == "affected" and d11["range"]["head"] == HEAD
    assert d11["range"]["summary"] == "affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)"
    assert SweepOutcome.from_dict(d11).range == D11_RANGE
    assert Sweep.from_dict(data) == Sweep.from_dict(sweep.to_dict())


def test_sarif_and_junit_carry_the_range(sweep):
    sarif = json.loads(SweepFormat.SARIF.to_formatter().format(sweep))
    run = sarif["runs"][0]
    assert run["properties"]["ranges"]["D11"].startswith("affected by range (introduced 0")
    d2 = next(r for r in run["results"] if r["ruleId"] == "D2")
    assert d2["properties"]["affectedRange"]["status"] == "affected"
    root = ET.fromstring(SweepFormat.JUNIT.to_formatter().format(sweep).split("\n", 1)[1])
    case = next(c for c in root.iter("testcase") if c.get("classname") == "kvdiag.D11")
    assert "range: affected by range (introduced 0" in case.find("error").text
    assert "range: affected by range" in case.find("system-out").text


def test_a_verdict_printed_by_run_has_a_range_line(tmp_path):
    from pathlib import Path

    from kvdiag.registry.loader import load_registry

    entry = load_registry(Path(__file__).resolve().parents[2] / "registry").get("D11")
    text = render_outcome(ranged(simple("D11", Verdict.INCONCLUSIVE, D11_REASON), D11_RANGE), entry, tmp_path)
    assert "  range: affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)\n" in text


def test_a_sweep_with_ranges_validates_against_the_schemas(sweep):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("referencing")
    from referencing import Registry, Resource

    from kvdiag.report.schemas import RUN_SCHEMA, SWEEP_SCHEMA, load_schema

    schemas = load_schema(SWEEP_SCHEMA), load_schema(RUN_SCHEMA)
    registry = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas])
    validator = jsonschema.Draft202012Validator(schemas[0], registry=registry)
    validator.validate(json.loads(SweepFormat.JSON.to_formatter().format(sweep)))
    broken = json.loads(SweepFormat.JSON.to_formatter().format(sweep))
    broken["outcomes"][1]["range"]["status"] = "probably"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_sarif_and_junit_with_ranges_still_validate_against_the_official_schemas(sweep):
    jsonschema = pytest.importorskip("jsonschema")
    xmlschema = pytest.importorskip("xmlschema")
    from pathlib import Path

    schemas = Path(__file__).resolve().parents[1] / "fixtures" / "schemas"
    sarif = json.loads((schemas / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(sarif).validate(json.loads(SweepFormat.SARIF.to_formatter().format(sweep)))
    xmlschema.XMLSchema(str(schemas / "junit-10.xsd")).validate(SweepFormat.JUNIT.to_formatter().format(sweep))


def test_the_table_says_how_each_tree_was_placed():
    """A tarball's range is placed by its files (engine.verdict.placement): the range column and line say so."""
    placed = RangeEvidence("fixed", "da7d1472d is an ancestor of ee401c8b6 (the same at each of ee401c8b6, d99724f2b)",
                           None, "ggml (shipped index (ggml history at d99724f2b))", placement="index",
                           placed="blob match of 6 file(s) (…) against the shipped index (ggml history at d99724f2b): "
                                  "ee401c8b6 (2026-08-20) .. d99724f2b (2026-08-21) (4 commits)")
    git = RangeEvidence("affected", "introduced 0208355f4 is an ancestor of e25a32e98, no fix recorded", HEAD,
                        placement="git", placed="git commit e25a32e98")
    sweep = make_sweep([ranged(d2_outcome(), git),
                        ranged(simple("D11", Verdict.NOT_APPLICABLE, "fixed by range"), placed)])
    lines = SweepFormat.TABLE.to_formatter().format(sweep).splitlines()
    cells = {line.split()[0]: " ".join(line.split()[3:5]) for line in lines if line.startswith(("D2 ", "D11 "))
             and " range: " not in line}
    assert cells == {"D2": "affected [git]", "D11": "fixed [index]"}
    assert ("D11 range: fixed by range (da7d1472d is an ancestor of ee401c8b6 (the same at each of ee401c8b6, "
            "d99724f2b)); placed by blob match of 6 file(s) (…) against the shipped index") in "\n".join(lines)


def test_a_verdict_says_how_a_git_tree_was_placed(tmp_path):
    from pathlib import Path

    from kvdiag.registry.loader import load_registry

    entry = load_registry(Path(__file__).resolve().parents[2] / "registry").get("D11")
    placed = RangeEvidence(D11_RANGE.status, D11_RANGE.detail, HEAD, D11_RANGE.tree, D11_RANGE.findings,
                           placement="git", placed="git commit e25a32e98")
    text = render_outcome(ranged(simple("D11", Verdict.INCONCLUSIVE, D11_REASON), placed), entry, tmp_path)
    assert ("  range: affected by range (introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98)\n"
            "  placed by: git commit e25a32e98\n") in text
