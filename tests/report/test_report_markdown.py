"""The Markdown sweep page: counts, a row per entry, evidence of what matters, log text kept literal."""

from __future__ import annotations

import re

from report_fixtures import HOSTILE_IMG, HOSTILE_SCRIPT, make_sweep, simple
from kvdiag.records.verdict import Evidence, Verdict
from kvdiag.report.formats import SweepFormat
from kvdiag.report.formats.markdown import md_code, md_fence, md_text
from kvdiag.store.sweeps import Sweep


def render(sweep: Sweep) -> str:
    return SweepFormat.MARKDOWN.to_formatter().format(sweep)


def test_header_counts_and_summary_rows(sweep: Sweep) -> None:
    text = render(sweep)
    assert text.startswith("# kvdiag sweep: d99724f2 on NVIDIA H200 (cc 9.0)\n")
    assert "2026-11-29 10:00 UTC · 7 entries · 4 min 06 s · kvdiag 0.1.0" in text
    assert "| confirmed | 2 |" in text and "| not-applicable | 1 |" in text
    assert "| [D2](#d2) | **confirmed** | 1/1 | - | 2048 error(s) at fattn-mma-f16.cuh:1538 | 2.5 s |" in text
    rows = [line for line in text.splitlines() if line.startswith("| [D")]
    assert len(rows) == 7


def test_every_entry_has_a_section_and_every_link_resolves(sweep: Sweep) -> None:
    """The summary links [D1](#d1); each target is the anchor a Markdown renderer gives a heading."""
    from kvdiag.report.formats.markdown import heading_anchor

    text = render(sweep)
    sections = re.findall(r"^#{1,6} (.+)$", text, re.M)
    assert [s for s in sections if re.fullmatch(r"D\d+", s)] == sweep.ids
    anchors = {heading_anchor(s) for s in sections}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) == len(sweep.ids) and set(links) <= anchors
    broken = text.replace("(#d2)", "(#d2-typo)")
    assert not set(re.findall(r"\]\(#([^)]+)\)", broken)) <= anchors


def test_evidence_in_full_only_for_confirmed_inconclusive_error_or_warned(sweep: Sweep) -> None:
    text = render(sweep)
    d2 = text.split("### D2", 1)[1].split("### D3", 1)[0]
    assert "- sanitizer errors: 2048" in d2
    assert "- instantiation `flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, (bool)0, " \
           "(bool)0, (bool)0, (bool)1>`" in d2
    assert "```\n========= Barrier error detected. Divergent thread(s) in block.\n" in d2
    assert "```sh\n/usr/local/cuda/bin/compute-sanitizer --tool synccheck" in d2
    brief = next(o.entry_id for o in sweep.outcomes if o.verdict.value in ("not-applicable", "not-reproduced"))
    assert "```" not in text.split(f"### {brief}\n", 1)[1].split("###", 1)[0]
    warned = render(make_sweep([simple("D13", Verdict.NOT_REPRODUCED, "ok", warnings=("the build is stale",))]))
    assert "### D13" in warned and "> warning: the build is stale" in warned


def test_build_and_environment_tables(sweep: Sweep) -> None:
    text = render(sweep)
    assert "| compute-sanitizer | 2025.3.1 |" in text
    assert "| GPU | NVIDIA H200, cc 9.0 (sm\\_90) |" in text
    assert "| staleness | current with its sources (ninja -n; its control passed on this machine) |" in text


def test_log_text_cannot_become_markup() -> None:
    ev = Evidence(quoted=("```", HOSTILE_SCRIPT))
    text = render(make_sweep([simple("D4", Verdict.CONFIRMED, f"why {HOSTILE_IMG} | pipe", evidence=ev)]))
    assert "````\n```\n" in text  # the fence outgrows the backticks it holds
    assert HOSTILE_SCRIPT not in text.replace("````\n```\n" + HOSTILE_SCRIPT, "")  # raw only inside the fence
    assert "&lt;img src=x onerror=alert(2)&gt;" in text and "\\| pipe" in text


def test_helpers() -> None:
    assert md_text("a|b <i> *x*") == "a\\|b &lt;i&gt; \\*x\\*"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`x") == "`` `x ``"
    assert md_fence(["x"]) == "```\nx\n```"
    assert md_fence(["````"], "sh") == "`````sh\n````\n`````"
