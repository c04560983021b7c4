"""`kvdiag sweep`: selection, sharding, the GPU/CPU split, saving, recording, exit codes.

Entries are fakes and `run_entry` is monkeypatched: no GPU, no build, no subprocess.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import kvdiag.engine.sweep.session as sweep_mod
from kvdiag.commands.sweeps import merge_cmd, sweep_cmd
from kvdiag.errors import RunInterrupted
from kvdiag.engine.verdict.judge import Gate
from kvdiag.engine.sweep.session import (
    SWEEP_FILE,
    build_sweep,
    execute_entries,
    needs_gpu,
    run_sweep,
    select_entries,
    shard_entries,
    sweep_exit_code,
)
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.errors import UsageError
from kvdiag.registry.entry import Entry
from kvdiag.store.history import history
from kvdiag.store.runs import RunStore
from kvdiag.store.sweeps import Sweep, load_sweep
from kvdiag.report.formats.table import TableFormat
from kvdiag.report.schemas import SWEEP_SCHEMA, load_schema

GPU_IDS = ["D1", "D2", "D3", "D10", "D12"]
CPU_IDS = ["D5", "D11", "D13"]
VERDICTS = {"D2": Verdict.CONFIRMED, "D3": Verdict.NOT_APPLICABLE, "D5": Verdict.SKIPPED,
            "D12": Verdict.INCONCLUSIVE}


def fake_entry(entry_id: str, gpu: bool) -> Entry:
    return Entry(id=entry_id, title=f"defect {entry_id}", summary="s", owner="upstream", status="open",
                 severity="high", reported="2026-01-01", modified="2026-01-01", path=Path(f"{entry_id}.md"), body="",
                 raw={}, requires={"gpu": True} if gpu else {"binaries": ["test-backend-ops"]},
                 location={"files": ["src/x.cu"]})


ENTRIES = sorted([fake_entry(i, True) for i in GPU_IDS] + [fake_entry(i, False) for i in CPU_IDS],
                 key=lambda e: e.id)  # not natural order on purpose


def outcome_for(entry: Entry, duration: float = 0.01) -> Outcome:
    verdict = VERDICTS.get(entry.id, Verdict.NOT_REPRODUCED)
    ev = Evidence(error_count=2048 if verdict is Verdict.CONFIRMED else None)
    return Outcome(entry.id, verdict, f"{entry.id} {verdict.value}", (Attempt("fast", 1, verdict, "r", ev),),
                   (), "fast", duration)


class FakeTarget:
    gpu = type("Gpu", (), {"devices": ()})()
    history = None          # no source tree: the ranges are not asked about

    def to_dict(self) -> dict:
        return {"build": {"build_dir": "/b", "git": {"commit": "abc123", "short": "abc123", "dirty": False}},
                "environment": {"key": "k1", "gpu": {"devices": [{"name": "NVIDIA H200",
                                                                  "compute_capability": "9.0"}]}}}


class Recorder:
    """A fake run_entry: records thread and overlap, writes run.json as the real one does."""

    def __init__(self, hook=None):
        self.calls: list[tuple[str, str]] = []
        self.gpu_running = 0
        self.max_gpu_running = 0
        self.lock = threading.Lock()
        self.hook = hook

    def __call__(self, entry, target, run_dir, *, options, gate_provider):
        assert gate_provider("synccheck").allowed
        assert options.cancel is not None
        with self.lock:
            self.calls.append((entry.id, threading.current_thread().name))
            if needs_gpu(entry):
                self.gpu_running += 1
                self.max_gpu_running = max(self.max_gpu_running, self.gpu_running)
        try:
            if self.hook:
                self.hook(entry)
            else:
                time.sleep(0.005)
            outcome = outcome_for(entry)
            run_dir.write("run.json", {"entry": entry.id, "status": "finished", "target": target.to_dict(),
                                       "outcome": outcome.to_dict()})
            return outcome
        finally:
            with self.lock:
                if needs_gpu(entry):
                    self.gpu_running -= 1


def allow(tool):
    return Gate(True, "control passed")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    return home


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch, home: Path) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(sweep_mod, "run_entry", recorder)
    monkeypatch.setattr(sweep_mod, "prepare_target", lambda build_dir, **kw: FakeTarget())
    monkeypatch.setattr(sweep_mod, "check_build_dir", lambda build_dir: build_dir)   # no build: a fake target
    monkeypatch.setattr(sweep_mod, "controls_gate_provider", lambda home, target, log_dir: allow)
    return recorder


# --------------------------------------------------------------------------- selection and shards


def test_select_entries_natural_order_only_and_exclude() -> None:
    assert [e.id for e in select_entries(ENTRIES)] == ["D1", "D2", "D3", "D5", "D10", "D11", "D12", "D13"]
    assert [e.id for e in select_entries(ENTRIES, ["d10,D2"], ["D2"])] == ["D10"]
    assert [e.id for e in select_entries(ENTRIES, None, ["D1", "D3,D5"])] == ["D2", "D10", "D11", "D12", "D13"]
    with pytest.raises(UsageError, match="D99"):
        select_entries(ENTRIES, ["D1,D99"])


def test_shards_partition_round_robin_by_natural_id() -> None:
    selection = select_entries(ENTRIES)
    assert [e.id for e in shard_entries(selection, "1/3")] == ["D1", "D5", "D12"]
    assert [e.id for e in shard_entries(selection, "2/3")] == ["D2", "D10", "D13"]
    assert [e.id for e in shard_entries(selection, "3/3")] == ["D3", "D11"]
    for n in range(1, 10):
        ids = [e.id for i in range(1, n + 1) for e in shard_entries(list(reversed(selection)), f"{i}/{n}")]
        assert sorted(ids) == sorted(e.id for e in selection) and len(ids) == len(set(ids))
    with pytest.raises(UsageError):
        shard_entries(selection, "4/3")


# --------------------------------------------------------------------------- the GPU/CPU split


def test_split_by_thread_and_order(fake_engine: Recorder, home: Path) -> None:
    announced = []
    run = execute_entries(select_entries(ENTRIES), FakeTarget(), RunStore(home), allow,
                          announce=lambda r: announced.append(r.entry.id))
    threads = dict(fake_engine.calls)
    main = threading.current_thread().name
    assert {i for i, t in threads.items() if t == main} == set(GPU_IDS)
    assert {i for i, t in threads.items() if t == "kvdiag-sweep-cpu"} == set(CPU_IDS)
    assert fake_engine.max_gpu_running == 1
    gpu_order = [i for i, _ in fake_engine.calls if i in GPU_IDS]
    assert gpu_order == ["D1", "D2", "D3", "D10", "D12"]
    assert [r.entry.id for r in run.results] == ["D1", "D2", "D3", "D5", "D10", "D11", "D12", "D13"]
    assert sorted(announced) == sorted(GPU_IDS + CPU_IDS) and not run.interrupted
    assert len({r.run_dir.path for r in run.results}) == 8


def test_concurrency_of_the_split(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    gpu_started, cpu_started = threading.Event(), threading.Event()
    met = {}

    def hook(entry):
        if needs_gpu(entry):
            gpu_started.set()
            if entry.id == "D1":
                met["gpu saw cpu"] = cpu_started.wait(5)
        else:
            cpu_started.set()
            met.setdefault("cpu saw gpu", gpu_started.wait(5))

    monkeypatch.setattr(sweep_mod, "run_entry", Recorder(hook))
    execute_entries(select_entries(ENTRIES), FakeTarget(), RunStore(home), allow)
    assert met == {"gpu saw cpu": True, "cpu saw gpu": True}


def test_a_harness_failure_is_that_entry_s_error_and_the_sweep_goes_on(monkeypatch, home: Path) -> None:
    def hook(entry):
        if entry.id in ("D2", "D11"):
            raise RuntimeError(f"boom in {entry.id}")

    monkeypatch.setattr(sweep_mod, "run_entry", Recorder(hook))
    run = execute_entries(select_entries(ENTRIES), FakeTarget(), RunStore(home), allow)
    verdicts = {r.entry.id: r.outcome.verdict for r in run.results}
    assert len(verdicts) == 8 and verdicts["D2"] is Verdict.ERROR and verdicts["D11"] is Verdict.ERROR
    d2 = next(r for r in run.results if r.entry.id == "D2")
    assert "RuntimeError: boom in D2" in d2.outcome.reason
    assert d2.run_dir.read()["outcome"]["verdict"] == "error"


def test_ctrl_c_keeps_what_finished_and_stops_both_queues(monkeypatch, home: Path) -> None:
    def hook(entry):
        if entry.id == "D2":
            raise RunInterrupted(Outcome("D2", Verdict.INCONCLUSIVE, "interrupted", extra={"interrupted": True}))
        if not needs_gpu(entry):
            time.sleep(0.05)

    monkeypatch.setattr(sweep_mod, "run_entry", Recorder(hook))
    run = execute_entries(select_entries(ENTRIES), FakeTarget(), RunStore(home), allow)
    ids = [r.entry.id for r in run.results]
    assert run.interrupted and "D1" in ids and "D2" in ids
    assert not {"D3", "D10", "D12"} & set(ids)  # the GPU queue stopped
    assert len([i for i in ids if i in CPU_IDS]) < len(CPU_IDS)  # the CPU worker was cancelled


# --------------------------------------------------------------------------- a whole sweep


def test_run_sweep_saves_records_and_exits_like_run(fake_engine: Recorder, home: Path, tmp_path: Path) -> None:
    save = tmp_path / "out" / "sweep.json"
    result = run_sweep(select_entries(ENTRIES), tmp_path, save=save)
    sweep = result.sweep
    assert sweep.ids == ["D1", "D2", "D3", "D5", "D10", "D11", "D12", "D13"]
    assert result.path == result.run_dir.path / SWEEP_FILE and load_sweep(result.path) == sweep == load_sweep(save)
    assert result.run_dir.read()["status"] == "finished" and result.run_dir.read()["entry"] == "sweep"
    d2 = sweep.outcome("D2")
    assert d2.title == "defect D2" and Path(d2.run_dir).is_dir() and d2.files == ("src/x.cu",)
    assert sweep.target["build"]["git"]["commit"] == "abc123" and sweep.shard is None
    assert sweep.kvdiag_version and sweep.started_at.endswith("+00:00") and sweep.wall_s >= 0
    assert [r.verdict for r in history("D2")] == ["confirmed"]
    assert sweep_exit_code(sweep) == 1


@pytest.mark.parametrize("verdicts, code", [
    (["confirmed", "error", "inconclusive"], 1), (["error", "inconclusive", "not-reproduced"], 70),
    (["inconclusive", "skipped"], 4), (["not-reproduced", "skipped", "not-applicable"], 0), ([], 0),
    # nothing judged is never the clean 0: skipped if anything was, else not-applicable
    (["skipped", "skipped"], 3), (["skipped", "not-applicable"], 3), (["not-applicable", "not-applicable"], 2),
])
def test_exit_codes(verdicts, code) -> None:
    sweep = Sweep({}, [{"entry": f"D{i}", "verdict": v} for i, v in enumerate(verdicts)], "", 0, None, "0")
    assert sweep_exit_code(sweep) == code
    assert sweep_exit_code(Sweep({}, [], "", 0, None, "0", interrupted=True)) == 130


# --------------------------------------------------------------------------- the commands


class FakeRegistry:
    entries = tuple(ENTRIES)

    def get(self, entry_id):
        return next(e for e in ENTRIES if e.id == entry_id.upper())


class FakeContext:
    registry = FakeRegistry()


def invoke(command, args):
    result = CliRunner().invoke(command, args, obj=FakeContext(), standalone_mode=False)
    if result.exception is not None:
        raise result.exception
    return result


def test_sweep_command_formats_and_exit_code(fake_engine: Recorder, home: Path, tmp_path: Path) -> None:
    result = invoke(sweep_cmd, ["--build", str(tmp_path), "--quiet", "--exclude", "D2"])
    assert result.return_value == 4  # D12 is inconclusive, nothing confirmed, no error
    assert result.stdout.splitlines()[2].split() == ["id", "verdict", "k/N", "range", "key", "evidence", "time"]
    out = tmp_path / "report.xml"
    result = invoke(sweep_cmd, ["--build", str(tmp_path), "--only", "D2,D13", "--format", "junit", "-o", str(out)])
    assert result.return_value == 1
    assert out.read_text(encoding="utf-8").startswith("<?xml") and "D2 " in result.stdout  # table to the terminal
    with pytest.raises(UsageError, match="a sweep needs a build"):
        invoke(sweep_cmd, [])
    with pytest.raises(UsageError, match="shard"):
        invoke(sweep_cmd, ["--build", str(tmp_path), "--shard", "0/2"])


def test_merge_of_shards_equals_the_unsharded_sweep(fake_engine: Recorder, home: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.json"
    invoke(sweep_cmd, ["--build", str(tmp_path), "--quiet", "--format", "json", "--save", str(whole)])
    parts = []
    for i in (3, 1, 2):
        part = tmp_path / f"shard{i}.json"
        invoke(sweep_cmd, ["--build", str(tmp_path), "--quiet", "--shard", f"{i}/3", "--save", str(part)])
        assert load_sweep(part).shard == f"{i}/3"
        parts.append(str(part))
    merged_path = tmp_path / "merged.json"
    result = invoke(merge_cmd, [*parts, "-o", str(merged_path), "--format", "json"])
    assert result.return_value == 1
    merged, reference = load_sweep(merged_path), load_sweep(whole)
    assert merged.ids == reference.ids == ["D1", "D2", "D3", "D5", "D10", "D11", "D12", "D13"]
    assert [o.verdict for o in merged.outcomes] == [o.verdict for o in reference.outcomes]
    assert merged.shard is None and json.loads(result.stdout)["outcomes"][1]["entry"] == "D2"
    with pytest.raises(UsageError, match="missing"):
        invoke(merge_cmd, [*parts[:2], "-o", str(tmp_path / "x.json")])


# --------------------------------------------------------------------------- several GPUs on one host


class FakeDevice:
    def __init__(self, index: int):
        self.index, self.name, self.uuid = index, "NVIDIA H200", f"GPU-{index}"
        self.compute_capability, self.pci_bus_id, self.total_memory_bytes = (9, 0), None, 143 << 30


def test_one_worker_per_gpu_each_entry_pinned_to_one_device(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPUs: GPU entries are shared between two device-pinned workers, never two at once on one device."""
    seen: list[tuple[str, str]] = []
    running: dict[str, int] = {"GPU-0": 0, "GPU-1": 0}
    most: dict[str, int] = {"GPU-0": 0, "GPU-1": 0}
    lock = threading.Lock()

    def run_entry(entry, target, run_dir, *, options, gate_provider):
        device = options.device
        if needs_gpu(entry):
            assert device is not None
            with lock:
                seen.append((entry.id, device.uuid))
                running[device.uuid] += 1
                most[device.uuid] = max(most[device.uuid], running[device.uuid])
            time.sleep(0.05)
            with lock:
                running[device.uuid] -= 1
        else:
            assert device is None
        return outcome_for(entry)

    monkeypatch.setattr(sweep_mod, "run_entry", run_entry)
    devices = [FakeDevice(0), FakeDevice(1)]
    run = execute_entries(select_entries(ENTRIES), FakeTarget(), RunStore(home), allow, devices=devices)
    gpu_ids = sorted(e.id for e in select_entries(ENTRIES) if needs_gpu(e))
    assert sorted(i for i, _ in seen) == gpu_ids                 # every GPU entry ran exactly once
    assert {u for _, u in seen} == {"GPU-0", "GPU-1"}            # both GPUs were used
    assert most == {"GPU-0": 1, "GPU-1": 1}                      # one entry at a time per GPU
    assert len(run.results) == len(select_entries(ENTRIES)) and not run.interrupted


def test_sweep_outcomes_name_their_gpu_and_the_table_shows_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each GPU entry's outcome carries the device its worker was pinned to; CPU-only ones carry none;
    with one chosen device, that device (not the default GPU) is the one used."""
    monkeypatch.setattr(sweep_mod, "run_entry", lambda entry, target, run_dir, *, options, gate_provider: outcome_for(entry))
    entries = select_entries(ENTRIES)
    run = execute_entries(entries, FakeTarget(), RunStore(home), allow, devices=[FakeDevice(1)])
    for r in run.results:
        assert (r.device or {}).get("uuid") == ("GPU-1" if needs_gpu(r.entry) else None)
    run = execute_entries(entries, FakeTarget(), RunStore(home), allow, devices=[FakeDevice(0), FakeDevice(1)])
    target = {"environment": {"gpu": {"devices": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}]}}}
    sweep = build_sweep(run, target, started_at="2026-11-29T00:00:00Z", wall_s=1.0, shard=None, selection=entries)
    by_id = {o.entry_id: o for o in sweep.outcomes}
    gpu_entry = next(e.id for e in entries if needs_gpu(e))
    cpu_entry = next(e.id for e in entries if not needs_gpu(e))
    assert by_id[gpu_entry].device["uuid"] in {"GPU-0", "GPU-1"} and by_id[cpu_entry].device is None
    table = TableFormat().format(sweep)
    header = next(line for line in table.splitlines() if line.startswith("id"))
    assert header.split()[-1] == "GPU"
    row = next(line for line in table.splitlines() if line.startswith(gpu_entry + " "))
    assert row.split()[-1] == by_id[gpu_entry].device["uuid"][-1]


# --------------------------------------------------------------------------- printed = rendered


def test_sweep_format_sarif_prints_the_source_paths_the_saved_sweep_records(home: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`kvdiag sweep --format sarif` prints the sweep as it is saved, its ``sources`` resolved against
    the tree: a fork keeps ggml under ggml/ whatever its cmake options say, so the printed SARIF and
    `kvdiag render` of the saved file both name ggml/src/ggml-cuda/... (before, the printed one
    was formatted before the save step and fell back to the options' layout: src/ggml-cuda/...)."""
    from kvdiag.commands.sweeps import render_cmd

    tree = tmp_path / "fork"
    (tree / "ggml" / "src" / "ggml-cuda").mkdir(parents=True)
    (tree / "ggml" / "src" / "ggml-cuda" / "fattn-mma-f16.cuh").write_text("// kernel\n")

    class TreeTarget(FakeTarget):
        def to_dict(self) -> dict:
            data = super().to_dict()
            data["build"].update(source_dir=str(tree), options={"GGML_CUDA": "ON"})   # no LLAMA_* option
            return data

    d2 = Entry(**{**fake_entry("D2", True).__dict__, "location": {"files": ["src/ggml-cuda/fattn-mma-f16.cuh"]}})

    class Registry:
        entries = (d2,)

    monkeypatch.setattr(sweep_mod, "run_entry", Recorder())
    monkeypatch.setattr(sweep_mod, "prepare_target", lambda build_dir, **kw: TreeTarget())
    monkeypatch.setattr(sweep_mod, "check_build_dir", lambda build_dir: build_dir)
    monkeypatch.setattr(sweep_mod, "controls_gate_provider", lambda home, target, log_dir: allow)
    saved = tmp_path / "sweep.json"
    result = CliRunner().invoke(sweep_cmd, ["--build", str(tmp_path), "--quiet", "--format", "sarif", "--save",
                                            str(saved)], obj=type("Ctx", (), {"registry": Registry()})(),
                                standalone_mode=False)
    assert result.exception is None and result.return_value == 1
    printed = json.loads(result.stdout)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in printed["runs"][0]["results"]]
    assert uris == ["ggml/src/ggml-cuda/fattn-mma-f16.cuh"]
    assert list(load_sweep(saved).outcome("D2").sources) == uris
    rendered = invoke(render_cmd, [str(saved), "--format", "sarif"])
    assert json.loads(rendered.stdout) == printed


# --------------------------------------------------------------------------- shards a job engine names


ENGINES = {   # the variables of task t (0..3) of a 4-way job, as each engine sets them
    "slurm from 0": lambda t: {"SLURM_ARRAY_TASK_ID": str(t), "SLURM_ARRAY_TASK_COUNT": "4",
                               "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_STEP": "1"},
    "slurm 1-7:2": lambda t: {"SLURM_ARRAY_TASK_ID": str(1 + 2 * t), "SLURM_ARRAY_TASK_COUNT": "4",
                              "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_STEP": "2"},
    "kubernetes": lambda t: {"JOB_COMPLETION_INDEX": str(t), "KVDIAG_SHARD_COUNT": "4"},
    "gitlab": lambda t: {"CI_NODE_INDEX": str(t + 1), "CI_NODE_TOTAL": "4"},
}


def sweep_validator():
    """The sweep schema's validator; jsonschema is a test dependency the device machine lacks."""
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(load_schema(SWEEP_SCHEMA))


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the job engines' variables from the machine running the tests."""
    from kvdiag.shards import ENGINE_VARIABLES

    for names in ENGINE_VARIABLES.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)


def invoke_in(env: dict[str, str], command, args):
    result = CliRunner().invoke(command, args, obj=FakeContext(), standalone_mode=False, env=env)
    if result.exception is not None:
        raise result.exception
    return result


@pytest.mark.parametrize("engine", list(ENGINES))
def test_four_auto_shards_merge_to_the_selection_of_one_sweep(fake_engine: Recorder, home: Path, tmp_path: Path,
                                                             no_engine, engine: str) -> None:
    whole = tmp_path / "whole.json"
    invoke(sweep_cmd, ["--build", str(tmp_path), "--quiet", "--save", str(whole)])
    parts = []
    for task in range(4):
        part = tmp_path / f"part-{task}.json"
        invoke_in(ENGINES[engine](task), sweep_cmd,
                  ["--build", str(tmp_path), "--quiet", "--shard", "auto", "--save", str(part)])
        saved = load_sweep(part)
        assert saved.shard == f"{task + 1}/4"
        assert saved.shard_from == {"engine": engine.split()[0], "variables": ENGINES[engine](task)}
        assert json.loads(part.read_text())["shard_from"]["variables"] == ENGINES[engine](task)
        sweep_validator().validate(json.loads(part.read_text()))
        parts.append(str(part))
    merged_path = tmp_path / "merged.json"
    result = invoke(merge_cmd, [*parts, "-o", str(merged_path)])
    merged, reference = load_sweep(merged_path), load_sweep(whole)
    assert merged.selection == reference.selection and merged.ids == reference.ids
    assert [o.verdict for o in merged.outcomes] == [o.verdict for o in reference.outcomes]
    assert result.return_value == 1 and merged.shard is None
    with pytest.raises(UsageError, match=r"incomplete: shard\(s\) 2/4 missing"):
        invoke(merge_cmd, [parts[0], *parts[2:], "-o", str(tmp_path / "x.json")])


def test_the_issue_s_slurm_example_runs_shard_3_of_4(fake_engine: Recorder, home: Path, tmp_path: Path,
                                                     no_engine) -> None:
    part = tmp_path / "part.json"
    result = invoke_in({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, sweep_cmd,
                       ["--build", str(tmp_path), "--shard", "auto", "--save", str(part)])
    # the 8 entries in id order, dealt round-robin: shard 3 gets positions 2 and 6
    assert load_sweep(part).ids == ["D3", "D12"]
    assert "shard 3/4 of 8 selected entries (from slurm: SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=4)" \
        in result.stdout


def test_auto_without_an_engine_is_refused_before_anything_runs(fake_engine: Recorder, home: Path,
                                                                tmp_path: Path, no_engine) -> None:
    with pytest.raises(UsageError, match="no job engine's variables are set"):
        invoke(sweep_cmd, ["--build", str(tmp_path), "--shard", "auto"])
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX=1 without a count"):
        invoke_in({"JOB_COMPLETION_INDEX": "1"}, sweep_cmd, ["--build", str(tmp_path), "--shard", "auto"])
    assert fake_engine.calls == [] and not (home / "runs").exists()
