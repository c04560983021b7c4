"""JUnit XML: one testsuite, a testcase per entry, totals consistent with the cases.

Validated structurally with ElementTree, and against the Jenkins xunit plugin's
official `junit-10.xsd` (tests/fixtures/schemas/, see SOURCES.md there) with xmlschema.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from report_fixtures import HOSTILE_SCRIPT, make_sweep, simple
from kvdiag.records.verdict import Evidence, Verdict
from kvdiag.report.formats import SweepFormat
from kvdiag.store.sweeps import Sweep

XSD = Path(__file__).parents[1] / "fixtures" / "schemas" / "junit-10.xsd"


def render(sweep: Sweep) -> str:
    return SweepFormat.JUNIT.to_formatter().format(sweep)


def suite_of(text: str) -> ET.Element:
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


def test_totals_match_the_testcases(sweep: Sweep) -> None:
    text = render(sweep)
    root = ET.fromstring(text.encode())
    suite = suite_of(text)
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests")) == len(sweep.outcomes)
    for kind, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        n = sum(1 for c in cases if c.find(kind) is not None)
        assert int(suite.get(attr)) == n, kind
        if attr != "skipped":                       # junit-10.xsd has no `skipped` on <testsuites>
            assert int(root.get(attr)) == n, kind
    assert root.get("skipped") is None
    assert all(len([x for x in c if x.tag in ("failure", "error", "skipped")]) <= 1 for c in cases)
    assert float(suite.get("time")) == pytest.approx(sweep.wall_s)


def test_verdicts_map_onto_failure_error_skipped_and_pass(sweep: Sweep) -> None:
    cases = {c.get("classname"): c for c in suite_of(render(sweep)).findall("testcase")}
    kinds = {cid: next((x.tag for x in c if x.tag in ("failure", "error", "skipped")), "pass")
             for cid, c in cases.items()}
    assert kinds == {"kvdiag.D2": "failure", "kvdiag.D3": "failure", "kvdiag.D5": "skipped",
                     "kvdiag.D7": "skipped", "kvdiag.D9": "error", "kvdiag.D11": "error", "kvdiag.D13": "pass"}
    d2 = cases["kvdiag.D2"].find("failure")
    assert d2.get("type") == "confirmed"
    assert d2.get("message") == "2048 error(s) at fattn-mma-f16.cuh:1538"
    assert "========= Barrier error detected. Divergent thread(s) in block." in d2.text
    assert "flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2" in d2.text
    assert "sanitizer errors: 2048" in d2.text
    assert cases["kvdiag.D5"].find("skipped").get("message").startswith("not-applicable: no FLASH_ATTN_EXT")
    assert cases["kvdiag.D7"].find("skipped").get("message").startswith("skipped: llama-server")
    assert "timed out after 120.0 s" in cases["kvdiag.D9"].find("error").get("message")
    assert cases["kvdiag.D2"].get("name").startswith("D2 Divergent")
    assert float(cases["kvdiag.D2"].get("time")) == pytest.approx(2.52)


def test_properties_carry_the_build_and_machine(sweep: Sweep) -> None:
    props = {p.get("name"): p.get("value") for p in suite_of(render(sweep)).find("properties")}
    assert props["build.commit"].startswith("d99724f2")
    assert props["build.dirty"] == "false"
    assert props["gpu.name"] == "NVIDIA H200" and props["gpu.cc"] == "9.0"
    assert props["compute_sanitizer"] == "2025.3.1"


def test_control_bytes_from_logs_are_escaped_and_markup_is_text() -> None:
    ev = Evidence(quoted=("\x1b[31mred\x1b[0m \x00 nul", HOSTILE_SCRIPT))
    text = render(make_sweep([simple("D4", Verdict.CONFIRMED, "bad \x07 bell", evidence=ev)]))
    failure = suite_of(text).find("testcase/failure")  # parses: no raw control byte made it in
    assert "\\x00 nul" in failure.text and "\\x07 bell" in failure.get("message") + failure.text
    assert HOSTILE_SCRIPT in failure.text  # as text: ElementTree escaped it in the file
    assert "<script>" not in text


@pytest.mark.parametrize("outcomes", ["all", "empty"])
def test_validates_against_the_jenkins_junit_xsd(outcomes: str) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    sweep = make_sweep() if outcomes == "all" else make_sweep([])
    xmlschema.XMLSchema(str(XSD)).validate(render(sweep))
