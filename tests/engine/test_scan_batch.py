"""`kvdiag scan` in batches: several cases per sanitized process, each judged on its own share.

The staged build is the scan tests' stand-in test-backend-ops (tests/scenarios/builds/
backend_ops_case_space.py) under the stand-in compute-sanitizer, which, like the real
tool without --log-file, reports into the program's terminal as the kernels finish.
The per-case scan of the same space is the reference: batches must give every case the
verdict, sites and instantiations one process per case gives it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import pid_gone, wait_until  # noqa: E402
from test_scan import (  # noqa: E402
    CRASH, DIVERGING, HANG, case, HANG_TIMEOUT, OK_CASES, OP, SITE, SUPPORTED_ORDER, recorded_pids,
    run_scan_in_process, scan_scenarios, stage_space, ScanRun,
)

from kvdiag.cli import main
from kvdiag.engine.scan.cases import CaseSpace, deal, exact_case_regex
from kvdiag.engine.scan.batch import MAX_BATCH, auto_batch_size, batch_regex, batch_step, batchable
from kvdiag.report.scan_text import render_scan
from kvdiag.records.verdict import Verdict
from kvdiag.store.runs import RunDir

CLEAN_SPACE = [*DIVERGING, *OK_CASES]     # no hang, no other death
_D, _OK = list(DIVERGING), OK_CASES
# Dealt into batches of at most 3 (four batches: positions 0,4,8 | 1,5,9 | 2,6 | 3,7):
# [affected, crash, affected] dies, [affected, hang, OK] hangs, the other two are judged whole.
MIXED_SPACE = [_D[0], _D[1], _OK[0], _OK[1], CRASH, HANG, _D[2], _OK[2], _D[3], _OK[3]]


@dataclass
class Staged:
    build: Path
    space: CaseSpace
    per_case: ScanRun
    batched: ScanRun           # batches of 3 over MIXED_SPACE (hang and crash included)
    batched_calls: list[str]   # the stand-in's -p regex per process of `batched`
    whole: ScanRun             # one batch of every case of MIXED_SPACE
    whole_calls: list[str]
    clean_build: Path
    clean: ScanRun             # batches of 4 over the diverging and OK cases only


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Staged:
    with scan_scenarios(tmp_path_factory, "scan-batch", "D921") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), MIXED_SPACE)
        per_case = run_scan_in_process(entry, target, RunDir(root / "per-case"), space, 2, batch=1)
        (build / "invocations.log").unlink()
        batched = run_scan_in_process(entry, target, RunDir(root / "batched"), space, 2, batch=3)
        batched_calls = calls(build)
        whole = run_scan_in_process(entry, target, RunDir(root / "whole"), space, 2, batch=len(MIXED_SPACE))
        whole_calls = calls(build)
        clean_build, clean_target, clean_space = stage_space(kv, RunDir(root / "enumerate-clean"), CLEAN_SPACE)
        clean = run_scan_in_process(entry, clean_target, RunDir(root / "clean"), clean_space, 2, batch=4)
        yield Staged(build, space, per_case, batched, batched_calls, whole, whole_calls, clean_build, clean)


def calls(build: Path) -> list[str]:
    """The -p regex of each process the stand-in ran since the last call (its log is then removed)."""
    log = build / "invocations.log"
    lines = log.read_text().splitlines()
    log.unlink()
    return lines


def judged(run: ScanRun) -> dict[str, tuple]:
    return {p: (a.verdict, tuple(s["site"] for s in a.evidence.sites), tuple(sorted(a.evidence.instantiations)))
            for p, a in run.result.results.items()}


def test_batches_give_every_case_the_verdict_it_gets_alone(staged):
    assert list(staged.space.supported) == MIXED_SPACE
    assert set(staged.batched.result.results) == set(SUPPORTED_ORDER)
    assert judged(staged.batched) == judged(staged.per_case)
    r = staged.batched.result
    assert {p for p, _ in r.affected} == set(DIVERGING)
    assert {p for p, _ in r.by_verdict(Verdict.NOT_REPRODUCED)} == set(OK_CASES)
    assert {p for p, _ in r.by_verdict(Verdict.INCONCLUSIVE)} == {HANG, CRASH}
    assert r.sites() and set(r.sites()) == {SITE}


def test_a_clean_space_runs_in_as_many_processes_as_batches_and_none_alone(staged):
    r = staged.clean.result
    assert r.batch_size == 4 and len(r.batches) == 2 and r.ran_alone() == 0 and r.processes == 2
    assert all(b["judged"] == 4 and b["why_again"] is None for b in r.batches)
    lines = (staged.clean_build / "invocations.log").read_text().splitlines()
    assert sorted(lines) == sorted([batch_regex(CLEAN_SPACE[0::2]), batch_regex(CLEAN_SPACE[1::2])])
    assert {p for p, _ in r.affected} == set(DIVERGING)
    assert {p for p, _ in r.by_verdict(Verdict.NOT_REPRODUCED)} == set(OK_CASES)
    # the gate is consulted for the unaffected cases only, as in a per-case scan
    assert staged.clean.gate_calls == ["synccheck"] * len(OK_CASES)


def test_a_case_counts_what_was_printed_with_it_as_the_tool_counts(staged):
    r = staged.clean.result
    for params, (_, printed) in DIVERGING.items():
        ev = r.results[params].evidence
        kernels = printed // 3
        # each kernel: 3 records and one "Error buffer overflow" warning, which the tool counts too
        assert ev.error_count == printed + kernels
        assert sum(s["count"] for s in ev.sites) == printed
        assert ev.quoted and "Barrier error detected" in ev.quoted[0]
    for params in OK_CASES:
        a = r.results[params]
        assert a.evidence.error_count == 0
        assert a.reason.startswith("1 matching case(s) executed (1 OK, 0 FAIL); the signature did not match")


def test_every_case_names_its_batch_and_its_lines_there(staged):
    r = staged.clean.result
    for params, attempt in r.results.items():
        (command,) = attempt.commands
        assert command["argv"][-1] in (batch_regex(CLEAN_SPACE[0::2]), batch_regex(CLEAN_SPACE[1::2]))
        start, end = command["batch_lines"]
        lines = (staged.clean.run_dir.path / command["stdout_path"]).read_text().splitlines()[start - 1:end]
        assert f"FLASH_ATTN_EXT({params}): " in lines[-1]
        assert sum("FLASH_ATTN_EXT(" in line for line in lines) == 1
        assert any("Barrier error" in line for line in lines) == (params in DIVERGING)


def test_batches_run_on_a_terminal_with_the_report_in_the_stream(staged):
    for cmd in (staged.clean.run_dir.logs).glob("batch*.cmd.json"):
        doc = json.loads(cmd.read_text())
        argv = doc["argv"]
        assert doc["tty"] is True
        assert "--log-file" not in argv
        assert argv[argv.index("--print-limit") + 1] == "0"
        assert argv[argv.index("--destroy-on-device-error") + 1] == "kernel"
        stdout = (staged.clean.run_dir.logs / doc["logs"]["stdout"]).read_text()
        assert "ERROR SUMMARY" in stdout and "FLASH_ATTN_EXT(" in stdout


def test_a_batch_that_dies_or_hangs_keeps_its_finished_cases_and_runs_the_rest_again(staged):
    r = staged.batched.result
    again = [b for b in r.batches if b["again"]]
    reasons = " | ".join(b["why_again"] for b in again)
    # [affected, crash, affected] and [affected, hang, OK]: each judged its first case, whose status printed
    assert len(again) == 2 and [b["judged"] for b in r.batches].count(1) == 2
    assert [b["judged"] for b in r.batches].count(2) == 2
    assert f"timed out: no output for {HANG_TIMEOUT:.1f} s" in reasons       # the hang's batch
    assert "the process did not finish (exit 6)" in reasons   # the crash's batch: the tool exits with the signal number
    lines = Counter(staged.batched_calls)
    # the case each batch was running, and the one after it (a half of one), ran again alone by its exact regex
    alone = {line for line in lines if not line.startswith("^(")}
    assert alone == {exact_case_regex(p) for p in (CRASH, MIXED_SPACE[8], HANG, MIXED_SPACE[9])}
    assert exact_case_regex(MIXED_SPACE[0]) not in alone and exact_case_regex(MIXED_SPACE[1]) not in alone
    assert r.ran_alone() == sum(b["again"] for b in again) == 4
    assert r.processes == 4 + 4 and r.to_dict()["processes"] == 8   # 4 batches, then 4 alone
    assert staged.per_case.result.processes == len(MIXED_SPACE)
    hang = r.results[HANG]
    assert hang.reason.startswith(f"timed out after {HANG_TIMEOUT:.1f} s (process group killed)")
    # the cases judged in a batch that then died name that batch and their lines in it
    (command,) = r.results[MIXED_SPACE[0]].commands
    assert command["argv"][-1] == batch_regex(MIXED_SPACE[0::4]) and command["batch_lines"][0] >= 1
    # no process is left: the batches', the single runs', the hang's grandchildren
    pids = recorded_pids(staged.build)
    assert wait_until(lambda: all(pid_gone(p) for p in pids), 10), [p for p in pids if not pid_gone(p)]


def test_one_bad_case_costs_a_batch_of_every_case_halves_not_a_process_per_case(staged):
    """The listing: 4 cases, CRASH, HANG, 4 cases. The batch dies at CRASH: the 4 before it are judged there,
    CRASH runs alone, the 5 after it in two batches; the first of those hangs at HANG at once, which runs
    alone, its 2 others in halves of one; the second is judged whole. Alone, each case was a process."""
    r = staged.whole.result
    assert judged(staged.whole) == judged(staged.per_case)
    rows = [(b["cases"], b["judged"], b["again"], b["split"]) for b in r.batches]   # cases, judged, alone, halved
    assert rows[0] == (10, 4, 1, 5) and sorted(rows[1:]) == [(2, 2, 0, 0), (3, 0, 3, 0)]
    alone = sorted(line for line in staged.whole_calls if not line.startswith("^("))
    assert alone == sorted(exact_case_regex(p) for p in (CRASH, HANG, MIXED_SPACE[6], MIXED_SPACE[7]))
    assert r.processes == len(staged.whole_calls) == 3 + 4 < len(MIXED_SPACE)
    assert r.ran_alone() == 4


def test_a_case_a_finished_batch_printed_no_status_for_runs_alone_and_is_not_lost(tmp_path_factory):
    """The program finished its walk but never reached one case of the batch (here: a case it does not list,
    put in the space by hand): the batch's other cases are judged there, that one runs again alone."""
    ghost = case("4,1", 2048, 32)                        # an OK-shaped case the stand-in does not list
    with scan_scenarios(tmp_path_factory, "scan-batch-ghost", "D922") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), CLEAN_SPACE)
        space = dataclasses.replace(space, supported=(*space.supported, ghost))
        run = run_scan_in_process(entry, target, RunDir(root / "ghost"), space, 1, batch=len(space.supported))
    r = run.result
    assert set(r.results) == {*CLEAN_SPACE, ghost}                       # every case has a verdict
    (row,) = r.batches
    assert (row["judged"], row["again"], row["split"]) == (len(CLEAN_SPACE), 1, 0)
    assert row["why_again"] == "no status of their own in the batch, or FAIL"
    alone = [line for line in calls(build) if not line.startswith("^(")]
    assert alone == [exact_case_regex(ghost)]
    assert {p for p, _ in r.affected} == set(DIVERGING)
    assert {p for p, _ in r.by_verdict(Verdict.NOT_REPRODUCED)} == set(OK_CASES)
    assert r.results[ghost].verdict is not Verdict.NOT_REPRODUCED      # nothing ran: never a clean verdict


def test_the_scan_table_says_how_the_cases_were_run(staged):
    text = render_scan(staged.batched.result, staged.batched.run_dir.path)
    assert re.search(r"processes: \d+ batch\(es\) of up to 3 case\(s\); \d+ case\(s\) then ran alone \(", text)
    assert "up to 3 cases per process, --print-limit 0" in (staged.batched.result.sanitizer_output or "") or \
        staged.batched.result.sanitizer_output is None


# ------------------------------------------------------------------ the pieces


def test_cases_are_dealt_round_robin_so_that_heavy_neighbours_part():
    numbered = list(enumerate("abcdefghij", start=1))
    assert deal(numbered, 3) == [[(1, "a"), (5, "e"), (9, "i")], [(2, "b"), (6, "f"), (10, "j")],
                                 [(3, "c"), (7, "g")], [(4, "d"), (8, "h")]]
    assert deal(numbered, 1) == [[c] for c in numbered]
    assert deal(numbered, 32) == [numbered]
    assert sorted(c for batch in deal(numbered, 4) for c in batch) == numbered


def test_batch_regex_matches_exactly_its_cases():
    cases = [c for c in SUPPORTED_ORDER[:5]]
    regex = batch_regex(cases)
    for c in SUPPORTED_ORDER:
        assert bool(re.search(regex, c)) == (c in cases)
    # a case that is a prefix of another does not select the longer one
    assert not re.search(batch_regex(["a=1,b=2"]), "a=1,b=2,c=3")


@pytest.mark.parametrize("cases, workers, size", [
    (132, 8, 9), (132, 16, 5), (2034, 9, 113), (3, 8, 1), (10_000, 8, MAX_BATCH), (0, 8, 1), (5, 0, 1)])
def test_auto_batch_size_gives_each_worker_two_batches(cases, workers, size):
    assert auto_batch_size(cases, workers) == size
    assert MAX_BATCH == 128


def test_only_a_test_backend_ops_step_with_a_params_regex_is_batched(d2):
    fast = d2.step("fast")
    assert batchable(fast)
    assert not batchable(d2.step("server"))
    assert not batchable(dataclasses.replace(fast, expect=("Testing 2 devices",)))
    step = batch_step(fast)
    assert step.tty and step.print_limit == 0
    assert step.sanitizer_options[-2:] == ("--destroy-on-device-error", "kernel")
    assert batch_step(step).sanitizer_options.count("--destroy-on-device-error") == 1


@pytest.mark.parametrize("argv, batch", [([], 0), (["--batch", "1"], 1), (["--batch", "12"], 12)])
def test_cli_batch_option_reaches_the_scan(kv, monkeypatch, argv, batch):
    import kvdiag.engine.scan.session as session
    from kvdiag.engine.scan.cases import ScanResult

    seen = {}

    def fake_run_scan(entry, build_dir, **kwargs):
        seen.update(kwargs)
        return ScanResult(entry.id, CaseSpace(OP, "x", (), ()), 1)

    monkeypatch.setattr(session, "run_scan", fake_run_scan)
    build = kv.build("backend_ops_case_space")
    assert main(["scan", "D2", "--build", str(build), *argv]) == 0
    assert seen["batch"] == batch


def test_cli_batch_out_of_range_is_a_usage_error(kv, capsys):
    build = kv.build("backend_ops_case_space")
    assert main(["scan", "D2", "--build", str(build), "--batch", "129"]) == 64   # ExitCode.USAGE
    assert "--batch" in capsys.readouterr().err


@pytest.mark.parametrize("n_devices, batched, workers", [(1, True, 16), (2, True, 8), (3, True, 6), (2, False, 16)])
def test_default_workers_share_one_gpu_s_pool_among_gpus_when_batched(n_devices, batched, workers, monkeypatch):
    from kvdiag.engine.scan.session import default_workers

    monkeypatch.delenv("KVDIAG_GPU_SLOTS", raising=False)
    monkeypatch.setattr("kvdiag.proc.slots.os.cpu_count", lambda: 16)     # a 16-core host, as the H200's

    h200 = type("D", (), {"total_memory_bytes": 150_109_880_320})()
    assert default_workers(h200, n_devices, batched) == workers
