"""The verdict history in $KVDIAG_HOME/history.sqlite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from store_fixtures import TARGET, outcome, sweep_of
from kvdiag.commands.sweeps import history_cmd
from kvdiag.records.verdict import Verdict
from kvdiag.store.history import (HISTORY_FILE, history, history_path, record_outcome, record_sweep, sweeps,
                                  sync_run_store)
from kvdiag.store.runs import RunDir, RunStore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    return home


def test_schema_has_runs_and_sweeps_tables(home: Path) -> None:
    record_outcome(outcome("D2"), TARGET, run_dir=None, home=home)
    assert history_path(home) == home / HISTORY_FILE
    with sqlite3.connect(history_path(home)) as conn:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "sweeps"} <= tables
    assert {"entry_id", "verdict", "k", "n", "reason", "build_commit", "dirty", "build_dir", "gpu_name", "cc",
            "driver", "sanitizer_version", "machine_key", "date", "run_dir"} <= cols


def test_record_outcome_and_read_it_back(home: Path) -> None:
    record_outcome(outcome("D2"), TARGET, run_dir="/x/runs/20261129-100000-D2-ab12",
                   date="2026-11-29T10:00:00+00:00", home=home)
    record_outcome(outcome("D2", Verdict.NOT_REPRODUCED), {}, run_dir=None,
                   date="2026-11-30T10:00:00+00:00", home=home)
    rows = history("d2", home=home)
    assert [r.verdict for r in rows] == ["confirmed", "not-reproduced"]
    first = rows[0]
    assert (first.k_of_n, first.error_count, first.build_commit, first.dirty, first.gpu_name, first.cc,
            first.driver, first.sanitizer_version, first.machine_key, first.run_id) == \
        ("1/1", 2048, "d99724f2a0c6", False, "NVIDIA H200", "9.0", "580.159.04", "2025.3.1", "5f0c2e91ab34",
         "20261129-100000-D2-ab12")
    assert rows[1].gpu_name is None and rows[1].dirty is None
    assert history("D9", home=home) == []


def test_the_same_run_is_recorded_once(home: Path) -> None:
    run_dir = "/x/runs/20261129-100000-D2-ab12"
    assert record_outcome(outcome("D2"), TARGET, run_dir=run_dir, home=home) is not None
    assert record_outcome(outcome("D2"), TARGET, run_dir=run_dir, home=home) is None
    assert len(history("D2", home=home)) == 1


def test_record_sweep_records_each_outcome_with_its_sweep(home: Path) -> None:
    sweep = sweep_of(["D1", "D2", "D4"])
    sweep_id = record_sweep(sweep, path="/x/sweep.json", home=home)
    assert [s["id"] for s in sweeps(home=home)] == [sweep_id]
    assert sweeps(home=home)[0]["counts"]["confirmed"] == 1 and sweeps(home=home)[0]["entries"] == 3
    rows = history("D2", home=home)
    assert len(rows) == 1 and rows[0].sweep_id == sweep_id and rows[0].date == sweep.started_at
    assert history("D4", home=home)[0].k_of_n == "-"


def test_sync_run_store_imports_finished_runs_once(home: Path) -> None:
    store = RunStore(home)
    for run_id, status in (("20261129-100000-D2-aaaa", "finished"), ("20261129-110000-D2-bbbb", "running"),
                           ("20261129-120000-target-cccc", "finished")):
        path = store.root / run_id
        path.mkdir(parents=True)
        data = {"entry": run_id.split("-")[2], "status": status, "target": TARGET, "kvdiag_version": "0.1.0"}
        if status == "finished" and data["entry"] == "D2":
            data["outcome"] = outcome("D2").to_dict()
        RunDir(path).write("run.json", data)
    (store.root / "20261129-130000-D2-dddd").mkdir()
    (store.root / "20261129-130000-D2-dddd" / "run.json").write_text("{broken", encoding="utf-8")
    assert sync_run_store(home) == 1
    assert sync_run_store(home) == 0
    rows = history("D2", home=home)
    assert len(rows) == 1 and rows[0].date == "2026-11-29T10:00:00+00:00" and rows[0].kvdiag_version == "0.1.0"


def test_a_verify_after_arm_is_not_a_verdict_of_the_users_build(home: Path) -> None:
    """The AFTER arm of `kvdiag verify` ran a scratch build with probes applied: the history of an
    entry over the user's builds leaves it out (the verification holds it); the BEFORE arm stays."""
    store = RunStore(home)
    for run_id, arm in (("20261202-124217-D3-aaaa", None), ("20261202-125049-D3-bbbb", "after")):
        path = store.root / run_id
        path.mkdir(parents=True)
        data = {"entry": "D3", "status": "finished", "target": TARGET, "outcome": outcome("D3").to_dict()}
        if arm:
            data["verify_arm"] = {"arm": arm, "verify_run": "20261202-124854-D3-verify",
                                  "probes": ["D2-fix-uniform-barrier"]}
        RunDir(path).write("run.json", data)
    assert sync_run_store(home) == 1
    assert [r.run_id for r in history("D3", home=home)] == ["20261202-124217-D3-aaaa"]


def test_history_command_table_and_json(home: Path) -> None:
    record_sweep(sweep_of(["D2"]), home=home)
    other = {**TARGET, "environment": {**TARGET["environment"], "key": "aaaabbbbcccc"}}
    record_outcome(outcome("D2", Verdict.NOT_REPRODUCED), other, run_dir="/x/runs/20261201-100000-D2-ffff",
                   date="2026-12-01T10:00:00+00:00", home=home)

    class NoRegistry:
        @property
        def registry(self):
            from kvdiag.errors import UsageError

            class R:
                def get(self, entry_id):
                    raise UsageError("no registry here")
            return R()

    runner = CliRunner()
    result = runner.invoke(history_cmd, ["d2"], obj=NoRegistry(), standalone_mode=False)
    assert result.exception is None, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["date", "(UTC)", "verdict", "k/N"]
    assert "confirmed" in lines[2] and "sweep 1" in lines[2] and "d99724f2a0" in lines[2] and "2048" in lines[2]
    assert "not-reproduced" in lines[3] and "aaaabbbb" in lines[3] and "20261201-100000-D2-ffff" in lines[3]
    result = runner.invoke(history_cmd, ["D2", "--format", "json"], obj=NoRegistry(), standalone_mode=False)
    import json

    assert [r["verdict"] for r in json.loads(result.output)] == ["confirmed", "not-reproduced"]
    result = runner.invoke(history_cmd, ["D9"], obj=NoRegistry(), standalone_mode=False)
    from kvdiag.errors import UsageError

    assert isinstance(result.exception, UsageError) and "no recorded outcome of it" in str(result.exception)
