"""The fault-injection suite: one scenario per fault group of issue #21.

Each scenario stages one fault (a fake build named by what it stages, a FIFO, a
device node, a planted symlink, a corrupt file, a write that raises ENOSPC, a
signal to the kvdiag process) and asserts the documented exit code, the one-line
message, what is left on disk, and that no process outlives kvdiag. Groups are
numbered as the README's table lists them.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import stat
import struct
import time
from pathlib import Path

import pytest

from faults_helpers import Faults, assert_all_gone, one_line, signal_when_started

ROOT = os.geteuid() == 0


def _tiny_synth_args(output) -> list[str]:
    return ["model", "synth", "--head-dim", "64", "--n-head", "2", "--n-head-kv", "2", "--n-layer", "1",
            "--n-embd", "128", "--n-ff", "128", "-o", str(output)]


# --------------------------------------------------------------------------- writes that never destroy

def test_g01_output_onto_a_device_node_is_refused_and_the_node_stays(kv: Faults):
    code, out, err = kv.cli(*_tiny_synth_args("/dev/full"))
    assert code == 64 and "wrote" not in out
    assert one_line(err) == ("kvdiag: refusing to write /dev/full: it is a device node, not a regular file "
                             "(kvdiag replaces only regular files)")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_g02_output_onto_a_fifo_is_refused_and_the_fifo_stays(kv: Faults):
    fifo = kv.root / "out.gguf"
    os.mkfifo(fifo)
    code, _, err = kv.cli(*_tiny_synth_args(fifo))
    assert code == 64 and "it is a FIFO, not a regular file" in one_line(err)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in kv.root.iterdir() if p.name.startswith(".out.gguf")] == []


def test_g03_output_through_a_symlink_writes_its_target_and_keeps_the_link(kv: Faults):
    target = kv.root / "real.gguf"
    target.write_text("old")
    link = kv.root / "link.gguf"
    link.symlink_to(target)
    code, out, _ = kv.cli(*_tiny_synth_args(link))
    assert code == 0, out
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes()[:4] == b"GGUF"
    loop = kv.root / "loop.gguf"
    loop.symlink_to(loop)
    code, _, err = kv.cli(*_tiny_synth_args(loop))
    assert code == 64 and one_line(err).endswith("it is a symlink loop")


def test_g04_sweep_save_onto_a_directory_or_fifo_is_refused_before_the_sweep(kv: Faults):
    build = kv.build("throws_healthily.sh")
    fifo = kv.root / "save.json"
    os.mkfifo(fifo)
    code, _, err = kv.cli("sweep", "--only", "D12", "--build", build, "--save", fifo, "--quiet")
    assert code == 64 and "it is a FIFO" in one_line(err)
    assert kv.runs("sweep") == []          # refused before anything ran


# --------------------------------------------------------------------------- the right run

def _finished_run(kv: Faults, run_id: str, verdict: str) -> Path:
    from kvdiag.store.runs import RunDir

    path = kv.home / "runs" / run_id
    path.mkdir(parents=True)
    outcome = {"entry": "D12", "verdict": verdict, "reason": f"{verdict} here", "attempts": [], "warnings": [],
               "step": "throw-probe", "duration_s": 0.1, "extra": {}}
    RunDir(path).write("run.json", {"entry": "D12", "status": "finished", "step": "throw-probe", "target": {},
                                    "outcome": outcome})
    return path


def test_g05_report_of_a_newest_run_that_cannot_be_read_is_65_not_an_older_run(kv: Faults):
    _finished_run(kv, "20261201-100000.000001-0001-D12", "not-reproduced")
    newest = _finished_run(kv, "20261201-100000.000002-0002-D12", "confirmed")
    (newest / "run.json").write_text("{torn")
    code, out, err = kv.cli("report", "D12")
    assert code == 65 and out == ""
    assert "20261201-100000.000002-0002-D12/run.json is not valid JSON" in one_line(err)


def test_g06_runs_started_in_one_second_are_ordered_by_creation(kv: Faults):
    from kvdiag.store.runs import RunStore

    store = RunStore(kv.home)
    made = [store.create("D12").run_id for _ in range(8)]
    assert [r.run_id for r in store.all_dirs()] == made
    assert store.find("latest").run_id == made[-1]


def test_g07_report_says_which_newer_unfinished_runs_it_passed_over(kv: Faults):
    _finished_run(kv, "20261201-100000.000001-0001-D12", "not-reproduced")
    running = kv.home / "runs" / "20261201-100000.000002-0002-D12"
    running.mkdir(parents=True)
    (running / "run.json").write_text(json.dumps({"entry": "D12", "status": "interrupted"}))
    code, out, err = kv.cli("report", "D12")
    assert code == 0 and out
    assert ("reporting 20261201-100000.000001-0001-D12, not the newer unfinished run(s) of D12: "
            "20261201-100000.000002-0002-D12 (interrupted)") in err


# --------------------------------------------------------------------------- local attackers

def test_g08_a_symlink_planted_as_a_lock_file_is_refused_and_its_target_untouched(kv: Faults):
    from kvdiag.proc.slots import SlotPool, UnsafeLockPath

    locks = kv.root / "locks"
    precious = kv.root / "precious.txt"
    precious.write_text("precious user data\n")
    (locks / "gpu0").mkdir(parents=True, mode=0o700)
    locks.chmod(0o700)
    (locks / "gpu0" / "slot-0.lock").symlink_to(precious)
    pool = SlotPool("gpu0", 2, root=locks)
    with pytest.raises(UnsafeLockPath, match="slot-0.lock: it is a symlink"):
        with pool.acquire(1, timeout=0):
            pass
    assert precious.read_text() == "precious user data\n"


def test_g09_a_lock_root_others_can_write_is_refused_with_one_line(kv: Faults):
    from kvdiag.proc.slots import SlotPool, UnsafeLockPath

    shared = kv.root / "shared-locks"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeLockPath, match="group- or world-writable"):
        with SlotPool("gpu0", 1, root=shared).acquire(1, timeout=0):
            pass
    hard = kv.root / "hard-locks"
    (hard / "gpu0").mkdir(parents=True)
    hard.chmod(0o700)
    (hard / "gpu0").chmod(0o700)
    victim = kv.root / "victim"
    victim.write_text("data")
    os.link(victim, hard / "gpu0" / "slot-0.lock")
    with pytest.raises(UnsafeLockPath, match="2 links"):
        with SlotPool("gpu0", 1, root=hard).acquire(1, timeout=0):
            pass
    assert victim.read_text() == "data"
    fresh = kv.root / "fresh" / "locks"
    with SlotPool("gpu0", 1, root=fresh).acquire(1, timeout=0):
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
        assert stat.S_IMODE((fresh / "gpu0" / "slot-0.lock").stat().st_mode) == 0o600


def test_g10_a_template_payload_fails_lint_and_executes_nowhere(kv: Faults):
    reg = kv.registry_copy("D12")
    marker = kv.root / "pwned"
    text = (reg / "D12.md").read_text()
    payload = "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
    (reg / "D12.md").write_text(text.replace('"test", "-b"', f'"{payload}", "-b"', 1))
    build = kv.build("throws_healthily.sh")
    code, out, _ = kv.cli("--registry", reg, "registry", "lint")
    assert code == 65
    assert "D12.md: repro[0].argv: template" in out and "reaches for attribute '__init__'" in out
    for args in (["list"], ["show", "D12", "--build", build], ["run", "D12", "--build", build, "--no-staleness"]):
        code, _, err = kv.cli("--registry", reg, *args)
        assert code == 65, (args, err)
    code, _, err = kv.cli("--registry", reg, "run", "D12", "--build", build)
    assert "D12 is malformed: D12.md: repro[0].argv" in one_line(err)
    assert not marker.exists()


def test_g11_the_sandbox_refuses_a_payload_even_if_lint_is_bypassed(kv: Faults):
    from kvdiag.engine.verdict.planning import _render, render_step
    from kvdiag.errors import UnsafeTemplate
    from kvdiag.registry.sandbox import SecurityError

    marker = kv.root / "pwned"
    with pytest.raises(SecurityError):
        _render("{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}", {})
    with pytest.raises(SecurityError):
        _render("{{ bin.__class__.__mro__ }}", {"bin": {}})
    assert not marker.exists()
    assert UnsafeTemplate.__mro__[1].__name__ == "TemplateProblem" and render_step


# --------------------------------------------------------------------------- every descendant ends with its run

@pytest.mark.parametrize("command, sig, code", [
    ("run", signal.SIGINT, 130),
    ("run", signal.SIGTERM, 143),
    ("run", signal.SIGHUP, 129),
    ("sweep", signal.SIGINT, 130),
    ("sweep", signal.SIGTERM, 143),
])
def test_g12_signals_end_the_whole_tree_setsid_included_and_record_the_run(kv: Faults, command, sig, code):
    build = kv.build("hangs_with_setsid_child.sh")
    args = (["run", "D12"] if command == "run" else ["sweep", "--only", "D12", "--quiet"])
    proc = kv.spawn(*args, "--build", build, "--no-staleness")
    pids, exit_code = signal_when_started(proc, build, sig)
    assert exit_code == code, kv.stderr_of_spawned()
    assert "Traceback" not in kv.stderr_of_spawned()
    assert_all_gone(pids)
    assert kv.run_json("D12")["status"] == "interrupted"
    assert f"interrupted by the user ({_user_name(sig)})" in kv.run_json("D12")["outcome"]["reason"]
    if command == "sweep":
        assert kv.run_json("sweep")["status"] == "interrupted"
        sweep = json.loads((kv.runs("sweep")[-1] / "sweep.json").read_text())
        assert sweep["interrupted"] is True and [o["entry"] for o in sweep["outcomes"]] == ["D12"]


def _user_name(sig: int) -> str:
    return "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name


SCANNABLE_D12 = '\n[scan]\nstep = "throw-probe"\nop = "FLASH_ATTN_EXT"\nparams = "hsk=64"\n'


def test_g12_sigterm_on_scan_ends_the_workers_trees_and_records_the_scan_interrupted(kv: Faults):
    """The scan's case runs in a worker thread: SIGTERM cancels it, the tree ends, the scan is recorded."""
    reg = kv.registry_copy("D12")
    text = (reg / "D12.md").read_text()
    fence = text.index("```", text.index("```toml") + 3)
    (reg / "D12.md").write_text(text[:fence] + SCANNABLE_D12 + text[fence:])
    build = kv.build("hangs_with_setsid_child.sh")
    proc = kv.spawn("--registry", reg, "scan", "D12", "--build", build, "--format", "json")
    pids, exit_code = signal_when_started(proc, build, signal.SIGTERM)
    assert exit_code == 143, kv.stderr_of_spawned()
    assert "Traceback" not in kv.stderr_of_spawned()
    assert_all_gone(pids)
    data = kv.run_json("scan-D12")
    assert data["status"] == "interrupted" and data["scan"]["interrupted"] is True
    assert {k: n for k, n in data["scan"]["counts"].items() if n} == {"inconclusive": 1}


def test_g12_ctrl_c_on_drift_ends_the_tree_and_records_the_run_interrupted(kv: Faults):
    build = kv.build("hangs_with_setsid_child.sh")
    proc = kv.spawn("drift", "--op", "FLASH_ATTN_EXT", "--params", "hsk=64", "--runs", "3", "--build", build,
                    env=kv.one_gpu())
    pids, exit_code = signal_when_started(proc, build, signal.SIGINT)
    assert exit_code == 130, kv.stderr_of_spawned()
    assert "Traceback" not in kv.stderr_of_spawned()
    assert_all_gone(pids)
    data = kv.run_json("drift-FLASH_ATTN_EXT")
    assert data["status"] == "interrupted" and data["reason"] == "interrupted by SIGINT"


def test_g13_run_timeout_ends_the_tree_and_is_inconclusive(kv: Faults):
    build = kv.build("hangs_with_setsid_child.sh")
    started = time.monotonic()
    code, out, _ = kv.cli("run", "D12", "--build", build, "--no-staleness", "--timeout", "1")
    assert code == 4 and "timed out" in out
    assert time.monotonic() - started < 20
    from faults_helpers import pids_of

    assert_all_gone(pids_of(build, timeout=1))
    data = kv.run_json("D12")
    assert data["status"] == "finished" and data["outcome"]["verdict"] == "inconclusive"


# --------------------------------------------------------------------------- every run ends on disk

def _gguf(kvs: bytes, n: int = 1) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, n) + kvs


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


@pytest.mark.parametrize("name, content, message", [
    ("string-2^62", _gguf(_kv(b"a", 8, struct.pack("<Q", 1 << 62))), "a string value declares 4611686018427387904"),
    ("string-2^64-1", _gguf(_kv(b"a", 8, struct.pack("<Q", (1 << 64) - 1))), "declares 18446744073709551615"),
    ("array-2^63", _gguf(_kv(b"a", 9, struct.pack("<IQ", 4, 1 << 63))), "runs past the end of the file"),
    ("nested-5000", _gguf(_kv(b"a", 9, struct.pack("<IQ", 9, 1) * 5000)), "arrays nested deeper than 8"),
])
def test_g14_hostile_gguf_lengths_are_65_with_the_offset(kv: Faults, name, content, message):
    model = kv.root / f"{name}.gguf"
    model.write_bytes(content)
    code, _, err = kv.cli("model", "info", model)
    line = one_line(err)
    assert code == 65 and "malformed GGUF at byte " in line and message in line


def test_g15_a_hostile_model_in_a_run_finishes_the_run_skipped(kv: Faults, monkeypatch):
    from kvdiag.engine.verdict.applicability import check_model_keys

    model = kv.root / "hostile.gguf"
    model.write_bytes(_gguf(_kv(b"a", 9, struct.pack("<IQ", 9, 1) * 5000)))
    reason = check_model_keys(["nextn_predict_layers"], str(model))
    assert reason and "cannot be read as a GGUF model" in reason and "nested deeper" in reason


def test_g16_a_full_disk_at_the_end_of_a_run_still_finishes_run_json(kv: Faults, monkeypatch):
    import kvdiag.fileio as fileio

    build = kv.build("throws_healthily.sh")
    real = fileio.atomic_file
    calls = {"n": 0}

    def full_disk(path, *a, **k):
        if Path(path).name == "run.json" and "-D12" in str(path):
            calls["n"] += 1
            if calls["n"] >= 2:            # the final write of the entry's run.json
                raise fileio.WriteFailed(f"cannot write {path}: {os.strerror(errno.ENOSPC)}")
        return real(path, *a, **k)

    monkeypatch.setattr(fileio, "atomic_file", full_disk)
    code, _, err = kv.cli("run", "D12", "--build", build, "--no-staleness")
    assert code == 70 and "No space left on device" in one_line(err)
    monkeypatch.setattr(fileio, "atomic_file", real)
    data = kv.run_json("D12")
    assert data["status"] == "failed" and "No space left on device" in data["reason"]


def test_g17_an_error_inside_a_run_finishes_it_failed_with_the_reason(kv: Faults, monkeypatch):
    import kvdiag.engine.verdict.plan as plan

    def broken(*a, **k):
        raise plan.UsageError("the planner could not go on")

    monkeypatch.setattr(plan, "judge_applicability", broken)
    build = kv.build("throws_healthily.sh")
    code, _, err = kv.cli("run", "D12", "--build", build, "--no-staleness")
    assert code == 64 and one_line(err) == "kvdiag: the planner could not go on"
    data = kv.run_json("D12")
    assert data["status"] == "failed" and data["reason"] == "the planner could not go on"


def test_g18_runs_shows_a_run_whose_process_is_gone_as_abandoned(kv: Faults):
    path = kv.home / "runs" / "20261201-100000.000001-0001-D12"
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"entry": "D12", "status": "running",
                                               "process": {"pid": 2 ** 22 + 7, "boot_id": "x", "start_ticks": 1}}))
    torn = kv.home / "runs" / "20261201-100000.000002-0002-D12"
    torn.mkdir()
    (torn / "run.json").write_text("{")
    code, out, _ = kv.cli("runs")
    assert code == 0
    assert "abandoned" in out.splitlines()[2] and "unreadable" in out.splitlines()[3]


# --------------------------------------------------------------------------- exit codes as documented

def test_g19_history_and_runs_of_an_unknown_id_are_64(kv: Faults):
    code, _, err = kv.cli("history", "D99")
    assert code == 64 and "no defect 'D99' in the registry" in one_line(err)
    code, _, err = kv.cli("runs", "--entry", "D99")
    assert code == 64 and "no defect 'D99'" in one_line(err)


@pytest.mark.parametrize("setting, message", [
    ("nosuchkey=1", "--set nosuchkey: not a variable of the step(s) run here"),
    ("timeout=0", "timeout is not a step variable: use --timeout SECONDS"),
    ("timeout=-5", "timeout is not a step variable"),
    ("seed=-1", "--set seed=-1: must be >= 0"),
])
def test_g20_set_is_validated_against_the_steps_variables(kv: Faults, setting, message):
    build = kv.build("throws_healthily.sh")
    code, _, err = kv.cli("run", "D12", "--build", build, "--set", setting)
    assert code == 64 and message in one_line(err)
    assert kv.runs() == []


def test_g21_a_malformed_entry_asked_for_is_65_with_lints_message(kv: Faults):
    reg = kv.registry_copy("D2", "D12")
    (reg / "D12.md").write_text((reg / "D12.md").read_text().replace('kind = "command"', 'kind = "commandz"'))
    code, _, err = kv.cli("--registry", reg, "run", "D12", "--build", kv.build("throws_healthily.sh"))
    assert code == 65 and one_line(err).startswith("kvdiag: D12 is malformed: D12.md: repro[0].kind")


def test_g22_an_empty_registry_is_65_not_silence(kv: Faults):
    reg = kv.root / "empty-registry"
    reg.mkdir()
    build = kv.build("throws_healthily.sh")
    for args in (["run", "--build", build], ["sweep", "--build", build]):
        code, out, err = kv.cli("--registry", reg, *args)
        assert code == 65 and "no usable entries" in one_line(err), args


@pytest.mark.parametrize("content, message", [
    ('{"format": "kvdiag-sweep/1", "outc', "not a {what}: Unterminated string"),
    ("[1, 2]", "not a kvdiag {what} (the JSON is not an object)"),
    ("[" * 100000, "nested too deeply"),
])
def test_g23_compare_and_merge_of_a_corrupt_sweep_are_65(kv: Faults, content, message):
    bad = kv.root / "bad.json"
    bad.write_text(content)
    # merge reads sweeps or scans, and says so
    for args, what in ((["compare", bad, bad], "sweep"),
                       (["merge", bad, "-o", kv.root / "merged.json"], "sweep or scan")):
        code, _, err = kv.cli(*args)
        assert code == 65 and message.format(what=what) in one_line(err), args
    assert not (kv.root / "merged.json").exists()


_SWEEP = {"format": "kvdiag-sweep/1", "target": {}, "selection": ["D12"], "started_at": "", "wall_s": 1.0,
          "kvdiag_version": "0", "outcomes": [{"entry": "D12", "verdict": "skipped", "reason": "r"}]}


def test_g23e_merge_never_writes_over_one_of_its_own_shards(kv: Faults):
    shard = kv.root / "p1.json"
    shard.write_text(json.dumps(_SWEEP))
    link = kv.root / "p1-link.json"
    link.symlink_to(shard)
    for output in (shard, link):
        code, _, err = kv.cli("merge", shard, "-o", output)
        assert code == 64 and "is one of the shards being merged" in one_line(err)
    assert json.loads(shard.read_text()) == _SWEEP


@pytest.mark.parametrize("change, message", [
    ({"outcomes": [{"entry": 1, "verdict": "skipped", "reason": "r"}]}, "outcome 0: 'entry' must be an id"),
    ({"target": "x"}, "'target' must be an object, not str"),
    ({"shard": 12}, "'shard' must be a string like '2/4', not int"),
    ({"shard": {"i": 1}}, "'shard' must be a string like '2/4', not dict"),
    ({"selection": [1]}, "'selection' must be a list of ids"),
])
def test_g23b_a_sweep_with_a_field_of_the_wrong_type_is_65_in_every_reader(kv: Faults, change, message):
    """Each of these once failed deep in a formatter or the merge: exit 70, "kvdiag itself failed"."""
    bad = kv.root / "bad.json"
    bad.write_text(json.dumps({**_SWEEP, **change}))
    for args in (["compare", bad, bad], ["render", bad], ["render", bad, "--format", "sarif"],
                 ["merge", bad, "-o", kv.root / "merged.json"]):
        code, _, err = kv.cli(*args)
        assert code == 65 and message in one_line(err), args
    assert not (kv.root / "merged.json").exists()


@pytest.mark.parametrize("cases", ['"x"', "[1]", '{"a": "x"}'])
def test_g23c_a_radius_from_a_scan_with_malformed_cases_is_65(kv: Faults, cases):
    scan = kv.root / "scan.json"
    scan.write_text(f'{{"format": "kvdiag-scan/1", "cases": {cases}}}')
    code, _, err = kv.cli("registry", "radius", "D2", "--from", scan, "--dry-run")
    assert code == 65 and one_line(err).endswith("not a saved scan: 'cases' must map each case to an object")


def test_g23d_runs_lists_a_run_json_with_a_malformed_outcome_as_unreadable(kv: Faults):
    path = _finished_run(kv, "20261201-100000.000001-0001-D12", "confirmed")
    (path / "run.json").write_text('{"entry": "D12", "status": "finished", "outcome": "y"}')
    for args in (["runs"], ["runs", "--entry", "D12"]):
        code, out, _ = kv.cli(*args)
        assert code == 0 and "unreadable  run.json: 'outcome' is not an object" in out, args
    code, _, err = kv.cli("report", "D12", "--run", path.name)
    assert code == 65 and one_line(err).endswith("'outcome' is not an object")


def test_g24_report_run_with_a_corrupt_run_json_is_65(kv: Faults):
    path = _finished_run(kv, "20261201-100000.000001-0001-D12", "confirmed")
    (path / "run.json").write_text("[]")
    code, _, err = kv.cli("report", "D12", "--run", path.name)
    assert code == 65 and one_line(err).endswith("run.json is not a JSON object")


def test_g25_analyze_of_a_truncated_gz_is_65_not_an_interrupt(kv: Faults):
    log = kv.root / "trunc.log.gz"
    log.write_bytes(gzip.compress(b"========= COMPUTE-SANITIZER\n" * 2000)[:60])
    code, _, err = kv.cli("analyze", log)
    assert code == 65 and "the .gz is truncated" in one_line(err)


def test_g26_analyze_of_random_bytes_is_65_not_a_log(kv: Faults):
    log = kv.root / "random.bin"
    log.write_bytes(os.urandom(4096))
    code, _, err = kv.cli("analyze", log)
    assert code == 65 and "not a compute-sanitizer log" in one_line(err)


@pytest.mark.skipif(ROOT, reason="root reads any folder: permissions cannot be staged")
def test_g27_an_unreadable_bin_folder_is_named(kv: Faults):
    build = kv.build("throws_healthily.sh")
    (build / "bin").chmod(0)
    try:
        code, out, err = kv.cli("run", "D12", "--build", build, "--no-staleness")
    finally:
        (build / "bin").chmod(0o755)
    assert code in (3, 64) and "cannot be read" in out + err and "Traceback" not in err


def test_g28_a_kvdiag_home_that_is_a_file_is_64(kv: Faults, monkeypatch):
    home = kv.root / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    code, _, err = kv.cli("runs")
    assert code == 64 and one_line(err) == f"kvdiag: KVDIAG_HOME {home} is not a directory; point KVDIAG_HOME at a folder"
    assert home.read_text() == "not a folder"


@pytest.mark.skipif(ROOT, reason="root writes any folder: a read-only home cannot be staged")
def test_g29_a_read_only_kvdiag_home_is_64(kv: Faults, monkeypatch):
    home = kv.root / "ro-home"
    home.mkdir()
    home.chmod(0o500)
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    try:
        code, _, err = kv.cli("runs")
    finally:
        home.chmod(0o700)
    assert code == 64 and "is not writable" in one_line(err)


def test_g30_a_corrupt_history_costs_history_65_and_never_the_sweeps_table(kv: Faults):
    kv.home.mkdir(parents=True)
    (kv.home / "history.sqlite").write_bytes(b"this is not a database" * 100)
    code, _, err = kv.cli("history", "D12")
    assert code == 65 and "history database" in one_line(err) and "move it aside" in one_line(err)
    build = kv.build("throws_healthily.sh")
    code, out, err = kv.cli("sweep", "--only", "D12", "--build", build, "--no-staleness", "--quiet")
    assert code == 0, err
    assert "D12" in out and "not-reproduced" in out
    assert "the sweep is saved but not recorded in the history" in err


def test_g31_synth_checks_the_parameter_product_before_allocating(kv: Faults):
    code, _, err = kv.cli("model", "synth", "--head-dim", "65536", "--n-head", "4096", "--n-head-kv", "4096",
                          "-o", kv.root / "huge.gguf")
    assert code == 64 and "the product of the dimensions is checked before anything is allocated" in one_line(err)
    assert not (kv.root / "huge.gguf").exists()


@pytest.mark.parametrize("stage, message", [
    ("not-executable", "is not executable (no execute permission)"),
    ("directory", "is a directory, not a program"),
    ("symlink-loop", "is a symlink loop"),
])
def test_g32_an_unusable_binary_is_named_precisely(kv: Faults, stage, message):
    build = kv.build(None)
    exe = build / "bin" / "test-backend-ops"
    if stage == "not-executable":
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o644)
    elif stage == "directory":
        exe.mkdir()
    else:
        exe.symlink_to(exe)
    code, out, _ = kv.cli("run", "D12", "--build", build, "--no-staleness")
    assert code == 3 and out.startswith("D12 SKIPPED")
    assert kv.run_json("D12")["outcome"]["reason"] == f"missing binary: test-backend-ops: {exe} {message}"


def test_g32b_several_entries_of_which_none_could_run_are_never_the_clean_0(kv: Faults):
    """0 means not-reproduced: a CI job must not read "nothing ran here" as a clean result."""
    build = kv.build(None)              # no test-backend-ops: every entry that needs it is skipped
    code, out, _ = kv.cli("run", "D12", "D11", "--build", build, "--no-staleness")
    heads = [line.split()[:2] for line in out.splitlines() if line.startswith("D1")]
    assert heads == [["D12", "SKIPPED"], ["D11", "SKIPPED"]] and code == 3


def test_g32c_run_of_several_entries_as_json_is_one_array(kv: Faults):
    """It printed one object per entry, back to back: no JSON parser reads that as one document."""
    build = kv.build(None)
    code, out, _ = kv.cli("run", "D12", "D11", "--build", build, "--no-staleness", "--format", "json")
    assert [(o["entry"], o["verdict"]) for o in json.loads(out)] == [("D12", "skipped"), ("D11", "skipped")]
    code, out, _ = kv.cli("run", "D12", "--build", build, "--no-staleness", "--format", "json")
    assert json.loads(out)["entry"] == "D12" and code == 3          # one entry: one object, as before


@pytest.mark.parametrize("args, option", [
    (["registry", "export", "--output", ""], "--output"), (["run", "D12", "--build", ""], "--build"),
    (["--registry", "", "list"], "--registry"), (["report", "D12", "-o", ""], "--output"),
])
def test_g32e_an_empty_path_is_refused_not_read_as_the_current_folder(kv: Faults, args, option, monkeypatch):
    """`--output ""` was `.`: registry export wrote 13 records into the current folder and exited 0."""
    monkeypatch.chdir(kv.root)
    before = sorted(p.name for p in kv.root.iterdir())
    code, _, err = kv.cli(*args)
    assert code == 64 and one_line(err) == f"kvdiag: {option}: an empty path was given"
    assert sorted(p.name for p in kv.root.iterdir()) == before


@pytest.mark.parametrize("args", [["scan", "D2"], ["drift"]])
def test_g33_a_missing_build_names_the_variable_it_could_have_come_from(kv: Faults, args, monkeypatch):
    """click's "Missing option '--build'" left a user who had exported a misspelt variable guessing."""
    monkeypatch.delenv("LLAMA_KV_BUILD", raising=False)
    code, _, err = kv.cli(*args)
    assert code == 64 and one_line(err).startswith("kvdiag: Missing option '--build' (or $LLAMA_KV_BUILD).")


def test_g32d_an_entry_named_twice_runs_once(kv: Faults):
    code, out, _ = kv.cli("run", "D12", "d12", "--build", kv.build(None), "--no-staleness")
    assert [line.split()[0] for line in out.splitlines() if line.startswith("D12")] == ["D12"] and code == 3
    assert len(kv.runs("D12")) == 1


# --------------------------------------------------------------------------- smaller

def test_g33_ten_megabytes_of_output_are_stored_once(kv: Faults):
    build = kv.build("prints_ten_megabytes.sh")
    code, _, _ = kv.cli("run", "D12", "--build", build, "--no-staleness")
    assert code == 0
    logs = kv.runs("D12")[-1] / "logs"
    out, combined = logs / "throw-probe-1.stdout.log", logs / "throw-probe-1.combined.log"
    assert out.stat().st_size > 10_000_000
    assert os.path.samefile(out, combined)          # one copy on disk
    used = sum(p.stat().st_blocks * 512 for p in {f.stat().st_ino: f for f in logs.iterdir()}.values())
    assert used < 15_000_000


def test_g34_a_hanging_help_probe_is_bounded_and_announced(kv: Faults, monkeypatch, capsys):
    import kvdiag.workspace.backend_ops as build_mod

    monkeypatch.setattr(build_mod, "PROBE_QUIET_S", 0.5)
    build = kv.build("hangs_on_help.sh")
    started = time.monotonic()
    info = build_mod.probe_backend_ops(build / "bin" / "test-backend-ops", log_dir=kv.root / "logs")
    assert time.monotonic() - started < 8
    assert any(n.startswith("--help hung: stopped after") for n in info.notes)
    assert "--help hung; stopped after" in capsys.readouterr().err


def test_g35_drift_without_a_gpu_is_skipped_without_running_the_binary(kv: Faults):
    build = kv.build("hangs_with_setsid_child.sh")
    code, out, _ = kv.cli("drift", "D8", "--build", build, "--runs", "1000")
    assert code == 3 and out.startswith("skipped: no CUDA GPU is visible")
    assert not (build / "pids").exists()
    assert kv.run_json("drift-D8")["status"] == "finished"


def test_g36_the_readme_says_the_main_command_exits_3_without_a_gpu():
    from faults_helpers import REPO

    readme = (REPO / "README.md").read_text()
    assert "exits 3" in readme and "without a GPU" in readme


def test_g37_the_fake_sanitizer_leaves_nothing_in_tmp(kv: Faults):
    import subprocess
    import sys
    import tempfile

    from faults_helpers import REPO

    before = {p.name for p in Path(tempfile.gettempdir()).glob("fake-sanitizer-*")}
    fake = kv.root / "san" / "compute-sanitizer"
    fake.parent.mkdir()
    fake.write_bytes((REPO / "tests" / "scenarios" / "fake_compute_sanitizer.py").read_bytes())
    fake.chmod(0o755)
    subprocess.run([sys.executable, str(fake), "--tool", "synccheck", "/bin/true"], capture_output=True, timeout=30)
    after = {p.name for p in Path(tempfile.gettempdir()).glob("fake-sanitizer-*")}
    assert after <= before
    assert [p.name for p in fake.parent.iterdir()] == ["compute-sanitizer"]
