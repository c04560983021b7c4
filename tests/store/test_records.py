"""run.json and sweep files round-trip through the typed records, and 0.1.x files (recorded
on the H200) read as the oldest version: run.json without ``schema_version`` as 1, a sweep of
format ``kvdiag-sweep/1`` (a sweep's ``format`` is its schema version)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvdiag.records.run import RUN_SCHEMA_VERSION, RunRecord
from kvdiag.records.sweep import SweepOutcome
from kvdiag.records.verdict import Outcome, Verdict
from kvdiag.store.runs import RUN_FILE, RunDir
from kvdiag.store.sweeps import SWEEP_FORMAT, Sweep, load_sweep, save_sweep
from store_fixtures import outcome, sweep_of

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-ggml-d99724f2"
OLD_RUNS = ["run-D2-confirmed.json", "run-D2-after-fix.json", "scan-D2-run.json"]
OLD_SWEEPS = ["sweep-base.json", "sweep-fixed.json"]


def test_a_run_json_written_reads_back_as_the_same_record(tmp_path):
    run = RunDir(tmp_path / "run")
    record = RunRecord(entry="D2", status="finished", outcome=outcome("D2"),
                       fields={"kvdiag_version": "0.1.1", "step": "fast", "target": {"build": {"lineinfo": True}}})
    run.write_record(record)
    assert run.read()["schema_version"] == RUN_SCHEMA_VERSION
    assert run.record() == record
    assert run.record().to_dict() == run.read()


def test_a_running_record_names_its_process_and_its_final_state_keeps_the_header(tmp_path):
    """Writers build a RunRecord (a scan here) and move it on with `with_status`; the store's one
    write point stamps the version and, while it runs, the process (for `abandoned`)."""
    run = RunDir(tmp_path / "run")
    running = RunRecord(entry="D2", status="running", kind="scan", fields={"op": "FLASH_ATTN_EXT"})
    run.write_record(running)
    data = run.read()
    assert data.pop("process")["pid"] == os.getpid()
    assert data == {"schema_version": RUN_SCHEMA_VERSION, "entry": "D2", "kind": "scan", "status": "running",
                    "op": "FLASH_ATTN_EXT"}
    finished = running.with_status("finished", outcome=outcome("D2"), scan={"cases": 3})
    run.write_record(finished)
    assert run.record() == finished and "process" not in run.read()
    assert run.record().fields == {"op": "FLASH_ATTN_EXT", "scan": {"cases": 3}}


def test_a_mapping_written_as_run_json_goes_through_the_record(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write(RUN_FILE, {"entry": None, "kind": "drift", "status": "finished", "verdict": "skipped"})
    assert run.read() == {"schema_version": RUN_SCHEMA_VERSION, "entry": None, "kind": "drift",
                          "status": "finished", "verdict": "skipped"}
    assert run.record() == RunRecord(entry=None, status="finished", kind="drift", fields={"verdict": "skipped"})


@pytest.mark.parametrize("name", OLD_RUNS)
def test_a_recorded_0_1_run_json_reads_as_version_1(name):
    data = json.loads((DEVICE / name).read_text())
    assert "schema_version" not in data
    record = RunRecord.from_dict(data)
    assert record.schema_version == 1 and record.entry == "D2"
    written = record.to_dict()
    assert written.pop("schema_version") == 1
    assert _without_added_nulls(written, data) == data     # nothing of the old file is lost or changed


def _without_added_nulls(written, old):
    """``written`` less the keys the old layout lacked and the new one writes as null
    (0.1.0's attempts had no ``device``)."""
    if isinstance(written, dict) and isinstance(old, dict):
        return {k: _without_added_nulls(v, old.get(k)) for k, v in written.items() if k in old or v is not None}
    if isinstance(written, list) and isinstance(old, list) and len(written) == len(old):
        return [_without_added_nulls(w, o) for w, o in zip(written, old)]
    return written


def test_a_recorded_outcome_becomes_typed_values():
    record = RunRecord.from_dict(json.loads((DEVICE / "run-D2-confirmed.json").read_text()))
    assert isinstance(record.outcome, Outcome) and record.outcome.verdict is Verdict.CONFIRMED
    assert record.outcome.attempts[0].evidence.error_count
    assert Outcome.from_dict(record.outcome.to_dict()) == record.outcome


def test_a_sweep_saved_loads_as_the_same_sweep(tmp_path):
    sweep = sweep_of(["D1", "D2", "D4"])
    path = save_sweep(sweep, tmp_path / "sweep.json")
    assert json.loads(path.read_text())["format"] == SWEEP_FORMAT
    assert load_sweep(path) == Sweep.from_dict(sweep.to_dict())
    assert load_sweep(path).to_dict() == sweep.to_dict()


@pytest.mark.parametrize("name", OLD_SWEEPS)
def test_a_recorded_0_1_sweep_reads_as_version_1(name):
    data = json.loads((DEVICE / name).read_text())
    assert data["format"] == "kvdiag-sweep/1"
    written = load_sweep(DEVICE / name).to_dict()
    assert written.pop("format") == SWEEP_FORMAT          # written again, it is the current version
    assert _without_added_nulls(written, data) == {k: v for k, v in data.items() if k != "format"}


@pytest.mark.parametrize("name", OLD_SWEEPS)
def test_a_recorded_0_1_sweep_holds_typed_outcomes_that_round_trip(name, tmp_path):
    sweep = load_sweep(DEVICE / name)
    assert all(isinstance(o, SweepOutcome) and isinstance(o.verdict, Verdict) for o in sweep.outcomes)
    assert all(o.sources is None and o.device is None for o in sweep.outcomes)    # /1 had neither
    assert Sweep.from_dict(sweep.to_dict()) == sweep
    assert load_sweep(save_sweep(sweep, tmp_path / "again.json")) == sweep


def test_a_sweep_outcome_keeps_its_sources_and_device():
    base = outcome("D2")
    typed = SweepOutcome.of(base, title="t", run_dir="/r", files=["src/ggml-cuda/fattn.cu"],
                            device={"index": 1, "name": "NVIDIA H200", "uuid": "GPU-1"},
                            sources=["ggml/src/ggml-cuda/fattn.cu"])
    data = typed.to_dict()
    assert data["sources"] == ["ggml/src/ggml-cuda/fattn.cu"] and data["device"]["uuid"] == "GPU-1"
    assert {k: v for k, v in data.items() if k in base.to_dict()} == base.to_dict()   # the outcome's keys as they were
    assert SweepOutcome.from_dict(json.loads(json.dumps(data))) == typed
    assert "sources" not in SweepOutcome.of(base).to_dict()         # unknown sources are left out, never null


def test_a_sweep_built_from_saved_outcomes_holds_typed_ones():
    sweep = Sweep({}, [{"entry": "D2", "verdict": "confirmed"}], "", 0.0, None, "0")
    assert sweep.outcome("D2") == SweepOutcome.of(Outcome("D2", Verdict.CONFIRMED, ""))
    assert sweep.counts()["confirmed"] == 1
