"""Every format is wired, reads only the sweep, and the shared views say the same thing."""

from __future__ import annotations

import copy
import json

import pytest

from report_fixtures import make_sweep, simple
from kvdiag.records.verdict import Verdict
from kvdiag.records.sweep import SweepOutcome
from kvdiag.report.formats import SweepFormat, SweepFormatter, entry_view, format_seconds, key_evidence
from kvdiag.store.sweeps import Sweep


@pytest.mark.parametrize("member", list(SweepFormat))
def test_every_format_member_gives_a_formatter_that_renders_the_sweep(member: SweepFormat, sweep: Sweep) -> None:
    formatter = member.to_formatter()
    assert isinstance(formatter, SweepFormatter)
    before = copy.deepcopy(sweep.to_dict())
    text = formatter.format(sweep)
    assert isinstance(text, str) and text.strip()
    assert "D2" in text
    assert sweep.to_dict() == before, f"{member.value} changed the sweep it formatted"
    assert formatter.suffix.startswith(".")


@pytest.mark.parametrize("member", list(SweepFormat))
def test_every_format_renders_an_empty_sweep(member: SweepFormat) -> None:
    assert member.to_formatter().format(make_sweep([])).strip()


def test_format_names_are_the_cli_choices() -> None:
    assert SweepFormat.names() == ["table", "json", "junit", "sarif", "markdown", "html"]


def test_table_has_one_row_per_entry_with_key_evidence_and_counts(sweep: Sweep) -> None:
    text = SweepFormat.TABLE.to_formatter().format(sweep)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("id "))
    assert header.split() == ["id", "verdict", "k/N", "range", "key", "evidence", "time"]
    d2 = next(line for line in lines if line.startswith("D2 "))
    assert "confirmed" in d2 and "1/1" in d2 and "2048 error(s) at fattn-mma-f16.cuh:1538" in d2 and "2.5 s" in d2
    d3 = next(line for line in lines if line.startswith("D3 "))
    assert "1/3" in d3 and "fattn.cu:380: fatal error" in d3
    d5 = next(line for line in lines if line.startswith("D5 "))
    assert "no FLASH_ATTN_EXT test case matches" in d5
    assert "d99724f2" in lines[0] and "NVIDIA H200 (cc 9.0)" in lines[0]
    assert lines[-2].startswith("7 entries in 4 min 06 s: 2 confirmed, 1 error, 1 inconclusive")
    assert lines[-1] == "D9 inconclusive: timed out after 120.0 s (process group killed) while running FLASH_ATTN_EXT(hsk=128)"


def test_json_format_is_the_saved_sweep(sweep: Sweep) -> None:
    data = json.loads(SweepFormat.JSON.to_formatter().format(sweep))
    assert Sweep.from_dict(data) == Sweep.from_dict(sweep.to_dict())
    d2 = data["outcomes"][0]
    assert d2["entry"] == "D2" and d2["title"].startswith("Divergent") and d2["run_dir"]
    assert d2["attempts"][0]["evidence"]["error_count"] == 2048


def test_key_evidence_prefers_count_and_site_then_failure_then_reason() -> None:
    sweep = make_sweep()
    by_id = {o.entry_id: o for o in sweep.outcomes}
    assert key_evidence(by_id["D2"]) == "2048 error(s) at fattn-mma-f16.cuh:1538"
    assert key_evidence(by_id["D3"]) == "ggml-abort: fattn.cu:380: fatal error"
    assert key_evidence(by_id["D7"]).startswith("llama-server is not in the build")
    long = simple("D9", Verdict.INCONCLUSIVE, "x" * 300)
    assert len(key_evidence(long, width=40)) == 40 and key_evidence(long, width=40).endswith("…")


def test_entry_view_strips_ansi_from_log_lines_and_uses_the_confirmed_attempt() -> None:
    from kvdiag.records.verdict import Evidence

    o = simple("D4", Verdict.CONFIRMED, "matched", evidence=Evidence(quoted=("\x1b[31m========= boom\x1b[0m",)))
    view = entry_view(SweepOutcome.of(o, title="t"))
    assert view.quoted == ("========= boom",)
    flaky = make_sweep().outcome("D3")
    assert entry_view(flaky).quoted == ("fattn.cu:380: fatal error",)
    assert [a[1] for a in entry_view(flaky).attempts] == ["not-reproduced", "confirmed", "not-reproduced"]


@pytest.mark.parametrize("seconds, text", [(2.44, "2.4 s"), (245.5, "4 min 06 s"), (7322, "2 h 02 min")])
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_key_evidence_names_the_matching_site_first_and_the_printed_count_when_the_tool_gives_none() -> None:
    """D15 on ggml v0.9.7 (device session 16, H100): racecheck's summary counts hazards, not errors, so the
    evidence has no error count; and sixteen CUB warnings at uninitialized_copy.cuh:60 outnumbered the two
    matching ssm_scan_f32 races, whose site the table must show."""
    from kvdiag.records.verdict import Evidence

    quoted = ("Error: Race reported between Write access at void ssm_scan_f32<(unsigned long)128, "
              "(unsigned long)16, (unsigned long)0>(const float *)+0xfb0 in ssm-scan.cu:79",)
    sites = ({"site": "uninitialized_copy.cuh:60", "kind": "race-hazard", "count": 16,
              "kernel": "cub::CUB_300001_SM_900::detail::uninitialized_copy_single"},
             {"site": "ssm-scan.cu:79", "kind": "race-hazard", "count": 1, "kernel": "ssm_scan_f32"},
             {"site": "ssm-scan.cu:78", "kind": "race-hazard", "count": 1, "kernel": "ssm_scan_f32"})
    confirmed = simple("D15", Verdict.CONFIRMED, "matched", evidence=Evidence(quoted=quoted, sites=sites))
    assert key_evidence(confirmed) == "2 printed finding(s) at ssm-scan.cu:79 (+2 sites)"
    other = simple("D15", Verdict.INCONCLUSIVE, "a different sanitizer finding", evidence=Evidence(sites=sites[1:]))
    assert key_evidence(other) == "2 printed finding(s) at ssm-scan.cu:79 (+1 site)"
