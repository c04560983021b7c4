"""`kvdiag scan` on a staged case space (tests/scenarios/builds/backend_ops_case_space.py).

The scenario's `support` mode lists 12 FLASH_ATTN_EXT cases for -p hsk=256 (10 supported,
2 not; one hsk=128 case is outside the regex); run one at a time under the fake
compute-sanitizer, the nb=3 cases diverge (barrier findings, SIGABRT), nb=32 cases are OK,
one case hangs (with a grandchild) and one dies of `CUDA error: out of memory`.
The space is scanned once with -j 4 and once with -j 1 (module fixture); the tests read
those two scans. Ctrl-C runs the scan in a child process (scan_driver.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kvdiag.engine.scan.cases as scan_mod
from engine_helpers import (
    ALLOWED, NO_GPU, REPO, SCENARIO_BUILDS, Scenarios, d2_like, pid_gone, wait_until,
)
from isolation import isolate
from kvdiag.cli import main
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.cases import CaseSpace, ScanResult, enumerate_cases, exact_case_regex, scan, scan_step
from kvdiag.report.scan_text import render_scan
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.errors import UsageError
from kvdiag.store.runs import RunDir

OP = "FLASH_ATTN_EXT"
TEMPLATE = ("hsk={hsk},hsv={hsk},nh=4,nr23=[{nr}],kv={kv},nb={nb},mask=1,sinks=0,max_bias=0.000000,"
            "logit_softcap=0.000000,prec=f32,type_K={t},type_V={t},permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")


def case(nr: str, kv: int, nb: int, t: str = "f16", hsk: int = 256) -> str:
    return TEMPLATE.format(hsk=hsk, nr=nr, kv=kv, nb=nb, t=t)


# The scenario's default space, and what each case must come out as.
DIVERGING = {  # params -> (ERROR SUMMARY count, printed findings)
    case("4,1", 512, 3): (2048, 3),
    case("4,1", 1024, 3): (4096, 3),
    case("1,1", 512, 3): (1024, 3),
    case("1,1", 113, 3): (256, 6),      # two tile instantiations at the same line
}
OK_CASES = [case("4,1", 512, 32), case("1,1", 512, 32), case("4,1", 1024, 32), case("1,1", 113, 32, "q8_0")]
HANG = case("4,1", 512, 512)
CRASH = case("4,1", 512, 75)
NOT_SUPPORTED = [case("4,1", 512, 3, "q5_1"), case("1,1", 512, 32, "q5_1")]
OUTSIDE = case("4,1", 512, 3, hsk=128)
SUPPORTED_ORDER = [*DIVERGING, *OK_CASES, HANG, CRASH]

SITE = "fattn-mma-f16.cuh:1538"
_TILE = ("flash_attn_ext_f16_process_tile<(int)256, (int)256, (int){}, (int){}, (int)2, (bool)0, (bool)0, "
         "(bool){}, (bool){}>")
_GLOBAL = "flash_attn_ext_f16<(int)256, (int)256, (int){}, (int){}, (bool)0, (bool)0>"
TILE_4_4 = _TILE.format(4, 4, 0, 1)
TILE_8_1 = _TILE.format(8, 1, 0, 1)
TILE_8_1_B = _TILE.format(8, 1, 1, 0)
GLOBAL_4_4 = _GLOBAL.format(4, 4)
GLOBAL_8_1 = _GLOBAL.format(8, 1)

HANG_TIMEOUT = 3


def scan_entry_body(timeout: int) -> str:
    return d2_like(timeout=timeout, requires="gpu = true") + (
        '\n[scan]\nstep = "fast"\nop = "FLASH_ATTN_EXT"\nparams = "hsk=256"\n')


@dataclass
class ScanRun:
    result: ScanResult
    run_dir: RunDir
    gate_calls: list[Any]
    reported: list[tuple[str, str]]     # (params, verdict) as on_case saw them


@dataclass
class Staged:
    build: Path
    space: CaseSpace
    enumerate_dir: RunDir
    scans: dict[int, ScanRun]


def run_scan_in_process(entry, target, run_dir: RunDir, space: CaseSpace, workers: int, **kwargs) -> ScanRun:
    calls: list[Any] = []
    reported: list[tuple[str, str]] = []

    def provider(tool):
        calls.append(tool)
        return no_sanitizer_gate(tool) if tool is None else ALLOWED

    result = scan(entry, target, run_dir, space=space, workers=workers, gate_provider=provider,
                  on_case=lambda p, a: reported.append((p, a.verdict.value)), **kwargs)
    return ScanRun(result, run_dir, calls, reported)


def stage_space(kv: Scenarios, enumerate_dir: RunDir, cases: list[str] | None = None):
    """A stand-in build (with `cases` as its case space, else the scenario's own), its
    target under the stand-in sanitizer, and the space as `support` mode lists it."""
    build = kv.build("backend_ops_case_space")
    if cases is not None:
        (build / "case-space.txt").write_text("\n".join(cases) + "\n")
    target = kv.target(build, sanitizer=kv.sanitizer())
    return build, target, enumerate_cases(target, OP, "hsk=256", enumerate_dir)


@contextlib.contextmanager
def scan_scenarios(tmp_path_factory, folder: str, entry_id: str):
    """A module's isolated scenario root and a scannable D2-like entry in its registry."""
    root = tmp_path_factory.mktemp(folder)
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, root)
        kv = Scenarios(root / "kv")
        yield root, kv, kv.entry(entry_id, scan_entry_body(HANG_TIMEOUT))


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Staged:
    with scan_scenarios(tmp_path_factory, "scan", "D920") as (root, kv, entry):
        enumerate_dir = RunDir(root / "enumerate")
        build, target, space = stage_space(kv, enumerate_dir)
        scans = {workers: run_scan_in_process(entry, target, RunDir(root / f"scan-j{workers}"), space, workers)
                 for workers in (4, 1)}
        yield Staged(build, space, enumerate_dir, scans)


def recorded_pids(build: Path) -> list[int]:
    folder = build / "pids"
    return [int(p.name.split(".")[0]) for p in folder.iterdir()] if folder.is_dir() else []


def leader_pids(run_dir: Path) -> list[int]:
    pids = []
    for cmd in (run_dir / "logs").glob("case*.cmd.json"):
        pid = json.loads(cmd.read_text()).get("pid")
        if pid:
            pids.append(pid)
    return pids


# ------------------------------------------------------------------ the case space

def test_support_mode_lists_the_space_with_its_ansi_colours_stripped(staged):
    space = staged.space
    assert space.op == OP and space.params == "hsk=256"
    assert list(space.supported) == SUPPORTED_ORDER
    assert list(space.not_supported) == NOT_SUPPORTED
    assert OUTSIDE not in space.supported + space.not_supported
    raw = (staged.enumerate_dir.logs / "enumerate.stdout.log").read_text()
    assert "\x1b[1;32mSUPPORTED\x1b[0m" in raw and "\x1b[1;31mNOT SUPPORTED\x1b[0m" in raw
    argv = json.loads((staged.enumerate_dir.logs / "enumerate.cmd.json").read_text())["argv"]
    assert argv[1:] == ["support", "-o", OP, "-b", "CUDA0", "-p", "hsk=256"]


def test_enumerate_without_test_backend_ops_is_a_usage_error(kv):
    target = kv.target(kv.build(None), sanitizer=None)
    with pytest.raises(UsageError, match="scan needs the build's test-backend-ops"):
        enumerate_cases(target, OP, "hsk=256", RunDir(kv.root / "e"))


# ------------------------------------------------------------------ aggregation

@pytest.mark.parametrize("workers", [4, 1])
def test_every_case_gets_its_own_verdict(staged, workers):
    run = staged.scans[workers]
    r = run.result
    assert r.workers == workers and not r.interrupted
    assert set(r.results) == set(SUPPORTED_ORDER)
    assert {p for p, _ in r.affected} == set(DIVERGING)
    assert {p for p, _ in r.by_verdict(Verdict.NOT_REPRODUCED)} == set(OK_CASES)
    assert {p for p, _ in r.by_verdict(Verdict.INCONCLUSIVE)} == {HANG, CRASH}
    for params, (errors, printed) in DIVERGING.items():
        ev = r.results[params].evidence
        assert ev.error_count == errors
        assert sum(s["count"] for s in ev.sites) == printed
        assert {s["site"] for s in ev.sites} == {SITE}
    for params in OK_CASES:
        a = r.results[params]
        assert a.reason.startswith("1 matching case(s) executed (1 OK, 0 FAIL); the signature did not match")
        assert a.evidence.error_count == 0
    # the gate is consulted only where a not-reproduced is at stake
    assert run.gate_calls == ["synccheck"] * len(OK_CASES)
    assert sorted(run.reported) == sorted((p, a.verdict.value) for p, a in r.results.items())


@pytest.mark.parametrize("workers", [4, 1])
def test_the_hang_times_out_alone_and_its_tree_is_killed(staged, workers):
    r = staged.scans[workers].result
    hang = r.results[HANG]
    assert hang.verdict is Verdict.INCONCLUSIVE
    assert hang.reason.startswith(f"timed out after {HANG_TIMEOUT:.1f} s (process group killed)")
    assert hang.duration_s >= HANG_TIMEOUT
    command = hang.commands[0]
    assert command["timed_out"] is True and command["survivors"] == []
    # nothing else waited for it or was lost with it
    assert all(a.duration_s < HANG_TIMEOUT for p, a in r.results.items() if p != HANG)
    # no process of either scan is left: sanitizers, programs, the hang's grandchild
    pids = recorded_pids(staged.build) + leader_pids(staged.scans[workers].run_dir.path)
    assert len(pids) >= 2 * len(SUPPORTED_ORDER)
    assert wait_until(lambda: all(pid_gone(p) for p in pids), 10), [p for p in pids if not pid_gone(p)]


def test_the_other_abort_is_inconclusive_not_affected(staged):
    crash = staged.scans[4].result.results[CRASH]
    assert crash.verdict is Verdict.INCONCLUSIVE
    assert crash.reason.startswith("a different failure: ")
    assert "(CUDA error: out of memory)" in crash.reason
    assert crash.evidence.error_count == 0 and not crash.evidence.matched


def test_not_supported_cases_are_listed_and_never_run(staged):
    lines = (staged.build / "invocations.log").read_text().splitlines()
    # each supported case ran exactly once per scan, selected by its exact regex
    assert Counter(lines) == {exact_case_regex(p): 2 for p in SUPPORTED_ORDER}
    for params in NOT_SUPPORTED:
        assert params not in staged.scans[4].result.results
        assert not any(re.search(line, params) for line in lines)
    data = staged.scans[4].result.to_dict()
    assert data["not_supported"] == NOT_SUPPORTED and data["not_run"] == []


@pytest.mark.parametrize("workers", [4, 1])
def test_sites_count_each_case_once(staged, workers):
    r = staged.scans[workers].result
    # the kv=113 case reports two tile instantiations at the same line: two sites, one case
    assert [s["site"] for s in r.results[case("1,1", 113, 3)].evidence.sites] == [SITE, SITE]
    assert list(r.sites().values()) == [{
        "site": SITE, "kind": "barrier-divergence", "cases": len(DIVERGING),
        "printed": sum(p for _, p in DIVERGING.values()), "errors": sum(e for e, _ in DIVERGING.values()),
    }]


@pytest.mark.parametrize("workers", [4, 1])
def test_instantiations_are_counted_per_affected_case(staged, workers):
    r = staged.scans[workers].result
    assert r.instantiations() == {TILE_4_4: 2, GLOBAL_4_4: 2, TILE_8_1: 2, GLOBAL_8_1: 2, TILE_8_1_B: 1}
    assert set(r.results[case("1,1", 113, 3)].evidence.instantiations) == {TILE_8_1, TILE_8_1_B, GLOBAL_8_1}


def test_one_worker_and_four_workers_agree_case_by_case(staged):
    def per_case(r: ScanResult) -> dict[str, tuple]:
        return {p: (a.verdict, a.reason, a.evidence.error_count, tuple(s["site"] for s in a.evidence.sites),
                    tuple(sorted(a.evidence.instantiations))) for p, a in r.results.items()}

    j4, j1 = staged.scans[4].result, staged.scans[1].result
    assert per_case(j4) == per_case(j1)
    assert len(per_case(j1)) == len(SUPPORTED_ORDER)
    assert j4.sites() == j1.sites() and j4.instantiations() == j1.instantiations()


def test_each_case_keeps_its_own_logs(staged):
    logs = staged.scans[4].run_dir.logs
    for i, params in enumerate(SUPPORTED_ORDER, start=1):
        cmd = json.loads((logs / f"case{i:04d}.cmd.json").read_text())
        assert cmd["argv"][-1] == exact_case_regex(params)
        assert (logs / f"case{i:04d}.combined.log").is_file()
        # the fake sanitizer writes its log when the program ends: the killed hang has none
        assert (logs / f"case{i:04d}.sanitizer.log").is_file() is (params != HANG)
    assert "Barrier error detected" in (logs / "case0001.sanitizer.log").read_text()
    assert "Barrier error detected" not in (logs / "case0005.sanitizer.log").read_text()


# ------------------------------------------------------------------ JSON and text

def test_to_dict_is_json_and_carries_the_aggregates(staged):
    r = staged.scans[4].result
    data = json.loads(json.dumps(r.to_dict()))
    assert data["entry"] == "D920" and data["op"] == OP and data["params"] == "hsk=256"
    assert data["workers"] == 4 and data["interrupted"] is False
    assert list(data["cases"]) == sorted(SUPPORTED_ORDER)
    assert data["counts"] == {"confirmed": 4, "not-reproduced": 4, "not-applicable": 0, "skipped": 0,
                              "inconclusive": 2, "error": 0}
    assert data["not_supported"] == NOT_SUPPORTED and data["not_run"] == []
    assert data["sites"] == list(r.sites().values())
    assert data["instantiations"] == r.instantiations()
    one = data["cases"][case("1,1", 113, 3)]
    assert one["verdict"] == "confirmed" and one["error_count"] == 256 and one["sites"] == [SITE, SITE]
    assert set(one["instantiations"]) == {TILE_8_1, TILE_8_1_B, GLOBAL_8_1}
    hang = data["cases"][HANG]
    assert hang["verdict"] == "inconclusive" and hang["error_count"] is None and hang["duration_s"] >= HANG_TIMEOUT
    assert data["sum_case_s"] == pytest.approx(sum(c["duration_s"] for c in data["cases"].values()), abs=0.01)


def test_text_table(staged):
    run = staged.scans[4]
    text = render_scan(run.result, run.run_dir.path)
    lines = text.splitlines()
    assert re.fullmatch(r"D920 scan of FLASH_ATTN_EXT /hsk=256/: 10 supported case\(s\), 2 not supported; "
                        r"10 run with 4 worker\(s\) in \d+\.\d s \(sum of per-case times \d+\.\d s\)", lines[0])
    assert "INTERRUPTED" not in text
    assert "affected: 4   unaffected: 4   inconclusive: 2   other: 0" in lines
    assert f"  {SITE} [barrier-divergence] in 4 case(s), 7424 sanitizer error(s), 15 printed" in lines
    assert f"     2  {TILE_4_4}" in lines and f"     1  {TILE_8_1_B}" in lines
    assert lines[-1] == f"run: {run.run_dir.path}"
    rows = {line.split()[-1]: line.split()[0] for line in lines if line.rstrip().endswith("v_is_view_of_k=0")}
    assert rows == {p: a.verdict.value for p, a in run.result.results.items()}
    # rows sorted by verdict, then case: the affected ones first
    verdicts = [line.split()[0] for line in lines if line.rstrip().endswith("v_is_view_of_k=0")]
    assert verdicts == ["confirmed"] * 4 + ["inconclusive"] * 2 + ["not-reproduced"] * 4
    row = next(line for line in lines if line.endswith(case("4,1", 1024, 3)))
    assert row.split()[:3] == ["confirmed", "4096", SITE]
    assert next(line for line in lines if line.endswith(HANG)).split()[:3] == ["inconclusive", "-", "-"]


def test_text_of_an_interrupted_scan_says_so():
    space = CaseSpace(OP, "hsk=256", ("a", "b"), ())
    r = ScanResult("D920", space, 2, {"a": Attempt("fast", 1, Verdict.NOT_REPRODUCED, "ok", Evidence())},
                   wall_s=1.0, interrupted=True)
    text = render_scan(r, Path("runs/x"))
    assert "1 run with 2 worker(s)" in text and "— INTERRUPTED, partial" in text.splitlines()[0]
    assert r.to_dict()["not_run"] == ["b"]


def test_limit_runs_only_the_first_cases(kv, staged):
    entry = kv.entry("D921", scan_entry_body(HANG_TIMEOUT))
    target = kv.target(kv.build("backend_ops_case_space"), sanitizer=kv.sanitizer())
    run = run_scan_in_process(entry, target, RunDir(kv.root / "limited"), staged.space, 2, limit=2)
    assert set(run.result.results) == set(SUPPORTED_ORDER[:2])
    assert run.result.to_dict()["not_run"] == SUPPORTED_ORDER[2:]
    assert {a.verdict for a in run.result.results.values()} == {Verdict.CONFIRMED}


# ------------------------------------------------------------------ Ctrl-C

def test_ctrl_c_keeps_every_finished_case_even_mid_recording(monkeypatch):
    """No processes: a Ctrl-C that lands while the finished cases of one wait() are being
    recorded (here: in on_case) must keep all of them, not only the first. One unit in flight per
    worker, so that c5 and c6 are still queued then (with more, they may have started: their
    processes' turns are kvdiag.proc.turns', tests/engine/test_dispatch_turns.py)."""
    quick_done = threading.Semaphore(0)

    def fake_attempt(entry, step, target, run_dir, index, label, options, gate_provider, name_prefix=None):
        if index <= 3:
            quick_done.release()
            return Attempt("fast", index, Verdict.NOT_REPRODUCED, "ok", Evidence())
        while not options.cancel.wait(0.01):
            pass
        return Attempt("fast", index, Verdict.INCONCLUSIVE, "interrupted", Evidence())

    import kvdiag.engine.scan.dispatch as dispatch_mod

    real_wait = dispatch_mod.wait

    def wait_after_the_quick_ones(fs, timeout=None, return_when=None):
        for _ in range(3):
            assert quick_done.acquire(timeout=5)
        time.sleep(0.05)   # all three futures are done when wait() looks
        return real_wait(fs, timeout=timeout, return_when=return_when)

    def on_case(params, attempt):
        raise KeyboardInterrupt

    monkeypatch.setattr(scan_mod, "attempt_step", fake_attempt)
    monkeypatch.setattr(dispatch_mod, "wait", wait_after_the_quick_ones)   # the pool both phases share
    monkeypatch.setattr(dispatch_mod, "UNITS_PER_WORKER", 1)
    entry = type("E", (), {"id": "D920", "scan": None, "default_step": None})()
    space = CaseSpace(OP, "x", tuple(f"c{i}" for i in range(1, 7)), ())
    r = scan(entry, None, RunDir(Path("unused")), space=space, workers=4, gate_provider=None, on_case=on_case)
    assert r.interrupted
    assert {p: a.verdict for p, a in r.results.items()} == {
        "c1": Verdict.NOT_REPRODUCED, "c2": Verdict.NOT_REPRODUCED, "c3": Verdict.NOT_REPRODUCED,
        "c4": Verdict.INCONCLUSIVE}
    assert r.to_dict()["not_run"] == ["c5", "c6"]


def test_ctrl_c_mid_scan_records_partial_results_and_leaves_no_process(kv):
    ok = [case("4,1", 512, 32), case("1,1", 512, 32)]
    hangs = [case("4,1", kv_, 512) for kv_ in (113, 512, 1024, 2048, 4096, 8192)]
    entry = kv.entry("D922", scan_entry_body(120))
    build = kv.build("backend_ops_case_space")
    (build / "case-space.txt").write_text("\n".join([*ok, *hangs, NOT_SUPPORTED[0]]) + "\n")
    run_dir = kv.root / "interrupted-scan"
    out_json = kv.root / "scan-result.json"
    finished: list[dict] = []
    code, err = interrupt_scan_driver(kv, build, entry.id, run_dir, out_json, finished,
                                      ready=lambda grandchildren: len(finished) >= 2 and len(grandchildren()) >= 2,
                                      timeout=30, what="no two finished cases and two hangs")
    assert code == 130, err
    assert "Traceback" not in err

    data = json.loads(out_json.read_text())
    assert data["interrupted"] is True
    cases = data["cases"]
    # the finished cases are kept with their verdicts; the two running hangs were cancelled
    assert {p: c["verdict"] for p, c in cases.items() if p in ok} == {p: "not-reproduced" for p in ok}
    running = [p for p in cases if p in hangs]
    assert len(running) == 2
    for p in running:
        assert cases[p]["verdict"] == "inconclusive"
        assert cases[p]["reason"] == "interrupted before the signature matched (partial logs kept)"
    assert sorted(data["not_run"]) == sorted(set(hangs) - set(running))
    assert data["not_supported"] == [NOT_SUPPORTED[0]]
    assert data["counts"]["not-reproduced"] == 2 and data["counts"]["inconclusive"] == 2
    assert {f["case"] for f in finished} >= set(ok)
    # the cancelled commands say so, and their groups were killed
    for cmd_file in (run_dir / "logs").glob("case*.cmd.json"):
        result = json.loads(cmd_file.read_text())["result"]
        if result["interrupted"]:
            assert result["group_killed"] is True and result["survivors"] == []
    # no sanitizer, program or grandchild is left
    pids = recorded_pids(build) + leader_pids(run_dir)
    assert len(pids) >= 4 + 2 + 4
    assert wait_until(lambda: all(pid_gone(p) for p in pids), 10), [p for p in pids if not pid_gone(p)]


# ------------------------------------------------------------------ the CLI without a GPU

@pytest.fixture
def no_gpu(monkeypatch):
    """prepare_target as on a machine without a GPU (this one has none; a GPU machine gets the same)."""
    import kvdiag.engine.scan.session as session

    real = session.prepare_target

    def prepare(*args, **kwargs):
        target = real(*args, **kwargs)
        return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=NO_GPU))

    monkeypatch.setattr(session, "prepare_target", prepare)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_cli_scan_without_a_gpu_is_one_clean_line(kv, no_gpu, capsys, fmt):
    build = kv.build("backend_ops_case_space")
    rc = main(["scan", "D2", "--build", str(build), "--format", fmt])
    out, err = capsys.readouterr()
    assert rc == 3  # the verdict's code: skipped
    assert out == ""
    assert err == "kvdiag: D2 cannot be scanned here: skipped: no CUDA GPU is visible on this machine\n"
    assert not (build / "invocations.log").exists()
    assert not list((kv.root.parent / "home" / "runs").glob("*/logs/enumerate.cmd.json"))
    recorded = [json.loads(p.read_text()) for p in (kv.root.parent / "home" / "runs").glob("*scan-D2*/run.json")]
    assert [r["verdict"] for r in recorded] == ["skipped"]



def interrupt_scan_driver(kv, build: Path, entry_id: str, run_dir: Path, out_json: Path, finished: list[dict], *extra: str,
                          ready, timeout: float, what: str) -> tuple[int, str]:
    """Run tests/scenarios/builds/scan_driver.py on ``build``, collect the cases it prints as they finish into
    ``finished``, send SIGINT once ``ready(grandchildren)`` holds (else fail, saying ``what`` did not happen in
    ``timeout`` s), and return its exit status and stderr. The driver is killed if it outlives the test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, str(SCENARIO_BUILDS / "scan_driver.py"), str(build), str(kv.sanitizer()), str(kv.registry_dir),
         entry_id, str(run_dir), str(out_json), "2", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=kv.root, text=True)
    reader = threading.Thread(target=lambda: [finished.append(json.loads(line)) for line in proc.stdout
                                              if line.startswith("{")], daemon=True)
    reader.start()

    def grandchildren() -> list[Path]:
        return list((build / "pids").glob("*.grandchild")) if (build / "pids").is_dir() else []

    try:
        wait_until(lambda: proc.poll() is not None or ready(grandchildren), timeout)
        assert ready(grandchildren), proc.stderr.read() if proc.poll() is not None else f"{what} in {timeout:g} s"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=timeout)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
        proc.stdout.close()
        proc.stderr.close()
    return proc.returncode, err

def test_cli_scan_of_a_missing_build_is_one_clean_line(kv, capsys):
    rc = main(["scan", "D2", "--build", str(kv.root / "nowhere")])
    out, err = capsys.readouterr()
    assert rc == 64 and out == ""
    assert err == f"kvdiag: build folder does not exist: {kv.root / 'nowhere'}\n"


def test_the_scan_section_sets_the_sanitizer_output_of_every_case(kv):
    """`[scan] print_limit` and `sanitizer_options` replace the step's for the scan only: a case
    command carries `--print-limit 1 --show-backtrace no`, while `kvdiag run`'s step keeps its own."""
    body = scan_entry_body(30) + 'print_limit = 1\nsanitizer_options = ["--show-backtrace", "no"]\n'
    entry = kv.entry("D924", body)
    step = scan_step(entry)
    assert step.print_limit == 1 and step.sanitizer_options == ("--show-backtrace", "no")
    assert entry.step("fast").print_limit != 1
    target = kv.target(kv.build("backend_ops_case_space"), sanitizer=kv.sanitizer())
    full = enumerate_cases(target, OP, "hsk=256", RunDir(kv.root / "enumerate-lean"))
    space = CaseSpace(OP, "hsk=256", tuple(p for p in full.supported if p != HANG)[:2], full.not_supported)
    run_dir = RunDir(kv.root / "lean")
    scan(entry, target, run_dir, space=space, workers=2, gate_provider=lambda tool: ALLOWED)
    result = scan(entry, target, RunDir(kv.root / "lean-again"), space=space, workers=2,
                  gate_provider=lambda tool: ALLOWED)
    assert result.to_dict()["sanitizer_output"] == (
        "per case --print-limit 1 --show-backtrace no (the scan's own settings: error counts compare with "
        "other scans of D924, not with `kvdiag run`)")
    argvs = [json.loads(c.read_text())["argv"] for c in sorted(run_dir.logs.glob("case*.cmd.json"))]
    assert len(argvs) == 2
    for argv in argvs:
        i = argv.index("--print-limit")
        assert argv[i + 1] == "1" and argv[argv.index("--show-backtrace") + 1] == "no"


# ------------------------------------------------------------------ a program that cannot list its cases

def test_a_program_that_dies_before_listing_is_not_an_empty_case_space(kv):
    """On an H200 a test-backend-ops whose libggml-cuda.so lacked the driver library died in
    `support` mode (`symbol lookup error`, exit 127) and the scan said "0 cases: not exercised by
    this build's tests". A listing the program never printed is a failure to show, not a space."""
    from kvdiag.errors import CaseListingFailed

    target = kv.target(kv.build("backend_ops_symbol_lookup_error"), sanitizer=kv.sanitizer())
    with pytest.raises(CaseListingFailed) as caught:
        enumerate_cases(target, OP, "hsk=256", RunDir(kv.root / "listing"))
    assert "(exit 127)" in str(caught.value)
    assert "symbol lookup error" in str(caught.value) and "cuDeviceGet" in str(caught.value)


def test_the_scan_of_such_a_program_is_inconclusive_in_one_line(kv, monkeypatch, capsys):
    import kvdiag.engine.scan.session as session
    from engine_helpers import fake_gpu

    real = session.prepare_target

    def with_a_gpu(*args, **kwargs):
        target = real(*args, **kwargs)
        return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=fake_gpu()))

    monkeypatch.setattr(session, "prepare_target", with_a_gpu)
    kv.entry("D922", scan_entry_body(HANG_TIMEOUT))
    build = kv.build("backend_ops_symbol_lookup_error")
    rc = main(["--registry", str(kv.registry_dir), "scan", "D922", "--build", str(build), "--no-route",
               "--sanitizer", str(kv.sanitizer())])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 4, err
    assert err[-1].startswith("kvdiag: D922 cannot be scanned here: inconclusive: `test-backend-ops support` "
                              "could not list the FLASH_ATTN_EXT cases (exit 127): ")
    assert "nothing to scan" not in "\n".join(err)
