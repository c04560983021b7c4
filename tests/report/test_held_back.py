"""Inconclusive verdicts say why on one line, and summaries say which control held how many back."""

from __future__ import annotations

from pathlib import Path

from kvdiag.controls.cache import ControlRecord, gate_for_record
from kvdiag.engine.scan.cases import CaseSpace, ScanResult
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.report.held_back import held_back, held_back_lines, one_line
from kvdiag.report.templating import render

NOT_RUN = gate_for_record("synccheck", None).reason
NO_LAUNCHER = gate_for_record("synccheck", ControlRecord(
    env_key="k", tool="synccheck", passed=False, date="2026-12-02",
    detail="not run: neither pycuda nor cupy is importable and nvcc is not found, so no canary can be launched",
    positive_detected=None, negative_clean=None)).reason


def _scan(reasons: list[str], clean: int = 2) -> ScanResult:
    cases = [f"case{i}" for i in range(len(reasons) + clean)]
    results = {c: Attempt("fast", 1, Verdict.INCONCLUSIVE, f"the signature did not match, but {r}", Evidence())
               for c, r in zip(cases, reasons)}
    results.update({c: Attempt("fast", 1, Verdict.NOT_REPRODUCED, "ok", Evidence()) for c in cases[len(reasons):]})
    return ScanResult("D2", CaseSpace("FLASH_ATTN_EXT", "hsk=256", tuple(cases), ()), 2, results, wall_s=1.0)


def _render_scan(result: ScanResult) -> str:
    from kvdiag.report.scan_text import render_scan

    return render_scan(result, Path("runs/x"))


def test_held_back_groups_by_control_and_names_the_fix():
    groups = held_back([NOT_RUN] * 3 + [NO_LAUNCHER] + ["a timeout after 60 s"])
    assert [(g.tool, g.count, g.fix) for g in groups] == [
        ("synccheck", 3, "kvdiag doctor"),
        ("synccheck", 1, "put the CUDA toolkit's nvcc on PATH (or pip install -e '.[gpu]'), then kvdiag doctor")]


def test_scan_text_says_why_and_what_fixes_it():
    text = _render_scan(_scan([NOT_RUN] * 3))
    assert "inconclusive: 3" in text
    assert f"inconclusive (3): the signature did not match, but {NOT_RUN}" in text.splitlines()
    assert "held back: 3 by synccheck's control (not run on this machine); fix: kvdiag doctor" in text.splitlines()


def test_a_clean_scan_has_no_held_back_line():
    assert "held back" not in _render_scan(_scan([], clean=3))


def test_verdict_text_gives_an_inconclusive_reason_on_one_line():
    reason = "the signature did not match, but " + NOT_RUN + " " + "x" * 150 + "\nsecond line"
    outcome = Outcome("D2", Verdict.INCONCLUSIVE, reason, ())
    text = render("verdict.txt.j2", o=outcome, title="t", run_dir="runs/x", command=None)
    assert f"  {one_line(reason)}" in text.splitlines()
    assert "  " + held_back_lines([reason])[0] in text.splitlines()


def test_sweep_table_lists_each_inconclusive_reason_and_the_held_back_summary():
    from report_fixtures import make_sweep, simple

    from kvdiag.report.formats import SweepFormat

    sweep = make_sweep([simple("D2", Verdict.INCONCLUSIVE, f"the signature did not match, but {NOT_RUN}"),
                        simple("D11", Verdict.INCONCLUSIVE, "timed out after 60 s\nwhile running"),
                        simple("D13", Verdict.NOT_REPRODUCED, "ok")])
    lines = SweepFormat.TABLE.to_formatter().format(sweep).splitlines()
    assert f"D2 inconclusive: the signature did not match, but {NOT_RUN}" in lines
    assert "D11 inconclusive: timed out after 60 s while running" in lines
    assert lines[-1] == "held back: 1 by synccheck's control (not run on this machine); fix: kvdiag doctor"


def test_verify_text_gives_each_side_on_one_line_and_what_held_the_after_back():
    from kvdiag.engine.verify.session import Conclusion, Side, VerifyReport
    from kvdiag.report.verify_text import render_report

    before = Side("before", Path("b"), Outcome("D2", Verdict.CONFIRMED, "1/1 runs matched\nthe signature", ()))
    after = Side("after", Path("a"), Outcome("D2", Verdict.INCONCLUSIVE,
                                             f"the signature did not match, but {NOT_RUN}", ()))
    report = VerifyReport("D2", ("D2-fix-uniform-barrier",), Path("src"), "d99724f2" * 5, before, after,
                          Conclusion.INCONCLUSIVE, "x", True, "", "")
    lines = render_report(report).splitlines()
    assert "before: 1/1 runs matched the signature" in lines
    assert "held back: 1 by synccheck's control (not run on this machine); fix: kvdiag doctor" in lines
