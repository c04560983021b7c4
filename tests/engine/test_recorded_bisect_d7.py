"""D7's fix bisection on the BeeLlama fork's real history, recorded on a 2-core CPU host (no GPU).

tests/fixtures/bisect/d7-fix-fork/README.md says which command wrote each file. The
record is read back with the typed records, rendered again and compared with what
kvdiag printed; the report of D7 states the commit it found and how.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvdiag import __version__, resources
from kvdiag.records.bisect import BAD, GOOD, ROLE_NEW, ROLE_OLD, BisectRecord, Direction
from kvdiag.registry.loader import load_registry
from kvdiag.report.bisect_text import render_bisect
from kvdiag.report.upstream import upstream_report
from kvdiag.store.runs import RunDir, RunStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bisect"
FIX = FIXTURES / "d7-fix-fork"
CAUSE = FIXTURES / "d7-cause-fork"
OLD = "ff3954375c38bf0755abbdcad414b339b21d794f"      # "Extend GGML backends for mixed-precision tail attention"
FIXED_BY = "c3ebc89de7d9c8a35b742db9eb598715d2948243"  # "Implement faithful KVarN exact-tail storage"
PARENT = "222688561"                                    # "Document exact standard KV tail representations"


def recorded(folder: Path = FIX) -> BisectRecord:
    return BisectRecord.from_dict(json.loads((folder / "bisect-run.json").read_text())["bisect"])


def test_the_fix_bisection_names_the_repair_of_the_call_sites():
    record = recorded()
    assert record.direction is Direction.FIX and record.entry_id == "D7"
    assert record.old == OLD and record.ends_verified and record.exit_code == 0
    assert record.found.commit == FIXED_BY
    assert record.found.subject == "Implement faithful KVarN exact-tail storage"
    assert record.found.verdict == "not-reproduced"
    assert record.parent.commit.startswith(PARENT) and record.parent.verdict == "confirmed"
    assert "flash_attn_ext_f16_process_tile" in record.parent.reason or "matched the signature" in record.parent.reason
    assert record.status_unchanged


def test_the_ends_were_judged_first_and_hold_what_a_fix_bisection_needs():
    record = recorded()
    old, new = record.ends()
    assert record.steps[0] is old and record.steps[1] is new
    assert (old.commit, old.verdict, old.exit) == (OLD, "confirmed", GOOD)
    assert (new.verdict, new.exit) == ("not-reproduced", BAD)
    assert "compile control passed" in new.reason


def test_every_step_records_its_commit_verdict_and_where_its_time_went():
    record = recorded()
    assert len(record.steps) >= 4 and not record.skipped()
    for step in record.steps:
        assert len(step.commit) == 40 and step.verdict in ("confirmed", "not-reproduced")
        assert step.configure_s is not None and step.configure_s > 0          # the compile's own configure
        assert step.build_s is not None and step.build_s > 0                  # the one object
        assert step.run_s is not None and step.duration_s >= step.configure_s + step.build_s
    clean = [s for s in record.steps if s.verdict == "not-reproduced"]
    broken = [s for s in record.steps if s.verdict == "confirmed"]
    # a broken object stops in nvcc's front end; a clean one is generated (PTX, -O0): minutes, not seconds
    assert max(s.build_s for s in broken) < min(s.build_s for s in clean)
    steps_file = json.loads((FIX / "bisect-steps.json").read_text())
    assert [s["commit"] for s in steps_file] == [s.commit for s in record.steps]


def test_rendering_the_record_again_gives_what_kvdiag_printed():
    record = recorded()
    printed = (FIX / "kvdiag-bisect.txt").read_text()
    assert render_bisect(record) == printed
    assert f"fixed by: {FIXED_BY[:12]} Implement faithful KVarN exact-tail storage" in printed
    rows = [ln.split() for ln in printed.splitlines() if ln.startswith(("old end", "new end", "step "))]
    assert rows[0][:5] == ["old", "end", OLD[:12], "confirmed", "broken"]
    assert rows[1][3:5] == ["not-reproduced", "fixed"]
    assert [(r[1], r[2], r[3]) for r in rows[2:]] == [
        ("c6f59af48a4d", "not-reproduced", "fixed"), ("9f5850a04034", "confirmed", "broken"),
        ("2226885615fd", "confirmed", "broken"), ("52c6f2c9e8fd", "not-reproduced", "fixed"),
        (FIXED_BY[:12], "not-reproduced", "fixed")]


def test_the_old_ends_compile_log_holds_the_stale_call_errors():
    log = (FIX / "old-end-ff3954375-compile.log").read_text()
    stale = ('fattn-mma-kvarn-case.cuh(171): error: no instance of function template "flash_attn_ext_f16_process_tile"'
             ' matches the argument list')
    assert log.count(stale) == 6


def test_git_confirms_the_found_commit_in_its_own_log():
    log = (FIX / "bisect-log.txt").read_text()
    assert f"# first fixed commit: [{FIXED_BY}] Implement faithful KVarN exact-tail storage" in log
    assert f"# broken: [{OLD}]" in log


def test_the_cause_bisection_names_the_signature_change_from_its_two_ends_alone():
    """28921ad97..ff3954375 is one commit: the ends are judged, git names the new end at `bisect start`."""
    record = recorded(CAUSE)
    assert record.direction is Direction.CAUSE and record.exit_code == 0
    old, new = record.ends()
    assert old.commit.startswith("28921ad97") and (old.verdict, old.exit) == ("not-reproduced", GOOD)
    assert (new.commit, new.verdict, new.exit) == (OLD, "confirmed", BAD)
    assert [s.role for s in record.steps] == [ROLE_OLD, ROLE_NEW]
    assert record.found.commit == OLD and record.parent.commit == old.commit
    assert render_bisect(record) == (CAUSE / "kvdiag-bisect.txt").read_text()
    assert f"# first bad commit: [{OLD}]" in (CAUSE / "bisect-log.txt").read_text()


@pytest.fixture
def d7_store(tmp_path: Path) -> tuple:
    """A run store holding the recorded bisection and one D7 run (the report is of a run)."""
    home = tmp_path / "home"
    store = RunStore(home)
    for folder in (FIX, CAUSE):
        data = json.loads((folder / "bisect-run.json").read_text())
        run = store.root / Path(data["bisect"]["run_dir"]).name
        run.mkdir(parents=True)
        RunDir(run).write("run.json", data)
    d7_run = store.root / "20261202-120000.000000-0099-D7"
    d7_run.mkdir(parents=True)
    outcome = {"entry": "D7", "verdict": "not-reproduced", "reason": "compiled clean", "step": "compile-kvarn-case",
               "attempts": [], "duration_s": 0.4}
    RunDir(d7_run).write("run.json", {"kvdiag_version": __version__, "entry": "D7", "status": "finished",
                                      "target": None, "overrides": {}, "outcome": outcome})
    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(resources.registry_dir() / "D7.md", registry / "D7.md")
    return load_registry(registry).get("D7"), RunDir(d7_run)


def test_the_report_of_d7_states_what_bisection_established(d7_store):
    entry, run = d7_store
    text = upstream_report(entry, run)
    section = text.split("## Bisection\n\n", 1)[1].split("\n## ", 1)[0]
    assert f"**fixed by `{FIXED_BY[:12]}`** (Implement faithful KVarN exact-tail storage): established by " \
           f"`kvdiag bisect --fix` over `{OLD[:12]}..a51b763fd5e6`" in section
    assert "both ends as required" in section and "(2026-12-02 " in section
    assert "- In the registry, for https://github.com/GenerelSchwerz/llama.cpp: " in section
    assert "introduced `ff3954375c38`, fixed `c3ebc89de7d9`" in section    # the registry's full ids, shortened
    assert section.startswith(f"- **introduced by `{OLD[:12]}`** (Extend GGML backends for mixed-precision tail "
                              f"attention): established by `kvdiag bisect --cause` over `28921ad9702d..{OLD[:12]}` "
                              "(2 commits judged, both ends as required)")
