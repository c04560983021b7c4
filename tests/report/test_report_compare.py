"""`kvdiag compare A B`: regressions, fixes, applicability, counts, entries on one side only."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from report_fixtures import d2_outcome, make_sweep, make_target, simple
from kvdiag.commands.sweeps import compare_cmd
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.report.compare import compare_sweeps, render_comparison
from kvdiag.store.sweeps import save_sweep


def with_count(entry_id: str, verdict: Verdict, count: int, k: int = 1, n: int = 1) -> Outcome:
    attempts = tuple(Attempt("fast", i, Verdict.CONFIRMED if i <= k else Verdict.NOT_REPRODUCED, "r",
                             Evidence(error_count=count if i <= k else 0)) for i in range(1, n + 1))
    return Outcome(entry_id, verdict, "r", attempts)


def pair():
    before = make_sweep([
        simple("D1", Verdict.NOT_REPRODUCED, "clean"),                 # → confirmed: regression
        d2_outcome(),                                                 # → not-reproduced: fixed
        simple("D4", Verdict.NOT_APPLICABLE, "no such op"),            # → not-reproduced: applicability
        simple("D5", Verdict.INCONCLUSIVE, "timed out"),               # → not-reproduced: changed (not a fix)
        with_count("D6", Verdict.CONFIRMED, 2048),                     # → confirmed, 1024 errors: unchanged + note
        with_count("D7", Verdict.CONFIRMED, 5, k=1, n=3),              # → confirmed 2/3: unchanged + k/N note
        simple("D8", Verdict.SKIPPED, "no model"),                     # → same
        simple("D9", Verdict.NOT_REPRODUCED, "clean"),                 # only in A
        simple("D10", Verdict.NOT_APPLICABLE, "old fork"),             # → confirmed: regression + applicability
    ])
    after = make_sweep([
        simple("D1", Verdict.CONFIRMED, "matched"),
        simple("D2", Verdict.NOT_REPRODUCED, "0 errors; control passed",
               evidence=Evidence(error_count=0)),
        simple("D4", Verdict.NOT_REPRODUCED, "clean"),
        simple("D5", Verdict.NOT_REPRODUCED, "clean"),
        with_count("D6", Verdict.CONFIRMED, 1024),
        with_count("D7", Verdict.CONFIRMED, 5, k=2, n=3),
        simple("D8", Verdict.SKIPPED, "no model"),
        simple("D10", Verdict.CONFIRMED, "matched"),
        simple("D12", Verdict.CONFIRMED, "new entry"),                 # only in B: never a regression
    ], started_at="2026-12-20T10:00:00+00:00")
    return before, after


def test_each_entry_gets_one_change_and_notes() -> None:
    comparison = compare_sweeps(*pair())
    changes = {e.entry: e.change for e in comparison.entries}
    assert changes == {"D1": "regression", "D2": "fixed", "D4": "applicability", "D5": "changed",
                       "D6": "unchanged", "D7": "unchanged", "D8": "unchanged", "D9": "only-in-a",
                       "D10": "regression", "D12": "only-in-b"}
    by_id = {e.entry: e for e in comparison.entries}
    assert by_id["D2"].notes == ("sanitizer errors 2048 → 0",)
    assert by_id["D6"].notes == ("sanitizer errors 2048 → 1024",)
    assert by_id["D7"].notes == ("k/N 1/3 → 2/3",)
    assert by_id["D10"].notes == ("applicability changed: not-applicable before",)
    assert [e.entry for e in comparison.regressions] == ["D1", "D10"]
    assert [e.entry for e in comparison.entries] == ["D1", "D2", "D4", "D5", "D6", "D7", "D8", "D9", "D10", "D12"]


def test_table_and_json(tmp_path: Path) -> None:
    comparison = compare_sweeps(*pair())
    table = render_comparison(comparison)
    d1 = next(line for line in table.splitlines() if line.startswith("D1 "))
    assert "REGRESSION" in d1 and "not-reproduced" in d1 and "confirmed" in d1
    assert table.rstrip().endswith("2 regression, 1 fixed, 1 applicability, 1 changed, 3 unchanged, 1 only-in-a, "
                                   "1 only-in-b")
    short = render_comparison(comparison, all_entries=False)
    assert "\nD8 " not in short and "\nD6 " in short  # D6 is unchanged but its count moved
    data = json.loads(json.dumps(comparison.to_dict()))
    assert data["counts"]["regression"] == 2 and data["before"]["commit"].startswith("d99724f2")


def test_different_machines_are_pointed_out() -> None:
    other = make_target()
    other["environment"]["key"] = "0000aaaa"
    before, _ = pair()
    after = make_sweep([simple("D1", Verdict.NOT_REPRODUCED, "clean")], target=other)
    assert "machine keys differ" in render_comparison(compare_sweeps(before, after))


def test_compare_command_exit_codes(tmp_path: Path) -> None:
    before, after = pair()
    a, b = save_sweep(before, tmp_path / "a.json"), save_sweep(after, tmp_path / "b.json")
    runner = CliRunner()
    result = runner.invoke(compare_cmd, [str(a), str(b)], obj=None, standalone_mode=False)
    assert result.exception is None and result.return_value == 1
    assert "REGRESSION" in result.output
    result = runner.invoke(compare_cmd, [str(b), str(b), "--format", "json", "--changed-only"], obj=None,
                           standalone_mode=False)
    assert result.return_value == 0
    assert json.loads(result.stdout)["entries"] == []
