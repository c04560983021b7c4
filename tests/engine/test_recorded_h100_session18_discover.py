"""Device session 18 on an H100 (tests/fixtures/device/h100-session18): racecheck routed by the shared
memory each launch holds, on ggml d99724f2 built there.

Three discoveries, one after the other: a warm-up that made the launch probe's program; racecheck over
IM2COL_3D, CONV_2D and MUL_MAT, routed by a pass without a sanitizer (the ops of session 17's A/B);
and the whole suite under racecheck and synccheck, stopped at its 520 s deadline. The saved documents
are read back, and recorded processes (two route processes, a racecheck batch, three synccheck
batches that listed their launches) are judged again from their raw logs with ``judge_process``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from pathlib import Path

import pytest

from kvdiag.engine.discover.batch import ROUTE, Unit, judge_process
from kvdiag.engine.discover.cases import CaseRecord
from kvdiag.engine.discover.routing import SharedMemoryRouter, holds_no_shared_memory, plan_routing
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session18"
SESSION17 = FIXTURE.parent / "h100-session17"


def read_gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        return fh.read()


def document(name: str, folder: Path = FIXTURE) -> dict:
    return json.loads(read_gz(folder / f"{name}.json.gz"))


def rejudge(run: str, process: str, folder: Path = FIXTURE) -> tuple[Unit, list[CaseRecord], dict]:
    """One recorded process judged again as the run judged it, its launches listed (by the tools that list
    them: every one but racecheck)."""
    record = json.loads(read_gz(folder / "logs" / run / f"{process}.cmd.json.gz"))
    argv, result = record["argv"], record["result"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    tool = argv[argv.index("--tool") + 1] if "--tool" in argv else ROUTE
    unit = Unit(tool, argv[argv.index("-o") + 1], cases)
    assert record["env_overrides"].get("KVDIAG_PRINT_LAUNCHES") == "1" or tool == "racecheck"
    text = strip_ansi(read_gz(folder / "logs" / run / f"{process}.stdout.log.gz"))
    outcome = judge_process(unit, split_cases(text, None if tool == ROUTE else tool), text, name=process,
                            log=process, wall_s=result["duration_s"], timed_out=result["timed_out"],
                            ended=result["description"], budget_s=120.0 if run == "ab-route" else 600.0,
                            listed=tool != "racecheck")
    assert not outcome.again and len(outcome.records) == len(cases)
    return unit, outcome.records, result


def recorded(doc: dict, process: str, tool: str) -> dict[str, dict]:
    return {c["params"]: c for c in doc["cases"] if c["tool"] == tool and (c["log"] or "").endswith(f"/{process}.stdout.log")}


def test_the_routed_racecheck_judged_every_case_of_the_three_ops_and_spared_the_two_without_shared_memory():
    doc = document("ab-route")
    assert doc["space"]["cases"] == 4191 and doc["interrupted"] is False and doc["workers"] == 9
    assert doc["totals"]["all"] == {"clean": 1141, "findings": 21, "aborted": 0, "not-supported": 0, "spared": 3029,
                                    "cut": 0}
    assert doc["routing"] == {"routed": ["racecheck"], "source": "route", "sanitized": 1162, "spared": 3029,
                              "why": "racecheck only on cases whose launches hold shared memory, the launches "
                                     "listed by a route pass without a sanitizer"}
    spared_ops = {c["op"] for c in doc["cases"] if c["state"] == "spared"}
    assert spared_ops == {"CONV_2D", "IM2COL_3D"}                    # every MUL_MAT case held some, or called cuBLAS
    assert round(doc["wall_s"], 1) == 90.6 and len(doc["processes"]) == 55


def test_no_case_routing_spared_had_a_finding_when_session_17_sanitized_it():
    """The same ops on the same tree, sanitized whole in session 17's launch-mode arm (unrouted; another
    machine and day, so only the findings compare): every case both judged agrees, spared against clean;
    the two that differ in name only are `__half2::operator=`, read as "=" before the parser's fix."""
    spec = importlib.util.spec_from_file_location(
        "bench_discover", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_discover.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    compared = bench.compare_arms(document("ab-auto", SESSION17), document("ab-route"), names=("s17", "route"))
    assert compared["cases_judged_by_both"] == 4095 and compared["spared_with_findings"] == 0
    assert compared["spared"] == {"s17": 0, "route": 3029} and compared["agree"] == 4093
    assert compared["ops_both_finished"] == {"CONV_2D": {"s17": 266.8, "route": 49.8, "ratio": 0.187},
                                             "IM2COL_3D": {"s17": 182.4, "route": 24.0, "ratio": 0.132}}


def test_a_conv_2d_route_process_lists_every_launch_without_shared_memory_and_spares_its_cases():
    doc = document("ab-route")
    unit, records, _ = rejudge("ab-route", "route-00006")
    assert unit.tool == ROUTE and unit.op == "CONV_2D" and len(records) == 256
    assert all(r.launches and r.shared_memory == 0 and holds_no_shared_memory(r) for r in records)
    router = SharedMemoryRouter(plan_routing(("racecheck",), "launch"), {"CONV_2D": unit.cases}, batch_size=lambda c: 32)
    units, spared = router.take(records)
    saved = recorded(doc, "route-00006", "racecheck")
    assert units == [] and {r.params for r in spared} == set(saved) == set(unit.cases)
    assert all(saved[r.params]["why"] == r.why for r in spared)


def test_a_mul_mat_route_process_lists_cublas_calls_as_unknown_so_every_case_is_sanitized():
    unit, records, _ = rejudge("ab-route", "route-00017")
    assert unit.op == "MUL_MAT" and not any(holds_no_shared_memory(r) for r in records)
    text = read_gz(FIXTURE / "logs" / "ab-route" / "route-00017.stdout.log.gz")
    assert "kvdiag-launch: cublasGemmBatchedEx  [kvdiag-smem ?+?]" in text
    assert sum(r.shared_memory is None for r in records) > 0 and sum((r.shared_memory or 0) > 0 for r in records) > 0


def test_a_racecheck_batch_of_mul_mat_judges_again_with_its_warning():
    doc = document("ab-route")
    unit, records, _ = rejudge("ab-route", "racecheck-00053")
    saved = recorded(doc, "racecheck-00053", "racecheck")
    assert len(saved) == 32
    for record in records:
        assert (record.state, [(f.kind, f.file, f.line, f.function) for f in record.findings]) == (
            saved[record.params]["state"],
            [(f["kind"], f["file"], f["line"], f["function"]) for f in saved[record.params]["findings"]])
    assert sum(r.state == "findings" for r in records) == 1


@pytest.mark.parametrize("process, op", [("synccheck-00198", "SOFT_MAX"), ("synccheck-00122", "ADD"),
                                         ("synccheck-00259", "FLASH_ATTN_EXT")])
def test_synccheck_batches_list_their_launches_and_judge_again_as_recorded(process, op):
    doc = document("whole")
    unit, records, _ = rejudge("whole", process)
    saved = recorded(doc, process, "synccheck")
    assert unit.op == op and set(saved) == set(unit.cases)
    for record in records:
        case = saved[record.params]
        assert (record.state, record.launches, record.shared_memory) == (
            case["state"], case["launches"], case["shared_memory"])
        assert sorted((f.kind, f.file, f.line) for f in record.findings) == sorted(
            (f["kind"], f["file"], f["line"]) for f in case["findings"])
    if op == "ADD":                                  # no shared memory: racecheck spared every case of the batch
        spared = recorded(doc, process, "racecheck")
        assert set(spared) == set(unit.cases) and {c["state"] for c in spared.values()} == {"spared"}
    if op == "FLASH_ATTN_EXT":                       # D2's divergent barrier, in a kernel holding shared memory
        assert any(r.findings for r in records) and all(r.shared_memory > 0 for r in records)


def test_the_whole_suite_stopped_at_its_deadline_before_racecheck_started():
    """What the device run showed: 515 s, every process a synccheck one, FLASH_ATTN_EXT's 3918 s of
    process time driven by D2's barrier records, and racecheck never released, since the router then
    waited for each op's listing to end (it now releases a batch as soon as one is full)."""
    doc = document("whole")
    assert doc["space"]["cases"] == 11942 and len(doc["space"]["ops"]) == 108 and doc["interrupted"] is True
    assert {p["tool"] for p in doc["processes"]} == {"synccheck"} and len(doc["processes"]) == 312
    assert doc["routing"]["sanitized"] == 0 and doc["routing"]["spared"] == 5374
    fa = sum(p["wall_s"] for p in doc["processes"] if p["op"] == "FLASH_ATTN_EXT")
    assert round(fa) == 3918 and round(sum(p["wall_s"] for p in doc["processes"])) == 4607
    roots = [(r["tool"], r["kind"], r["site"], r["cases"], r["known"]) for r in doc["roots"]]
    assert roots == [("synccheck", "barrier-divergence", "src/ggml-cuda/fattn-mma-f16.cuh:1538", 745, "D2"),
                     ("synccheck", "barrier-divergence", "src/ggml-cuda/fattn-mma-f16.cuh:1563", 5, "D2")]


def test_the_probe_printed_each_kernels_shared_memory_on_the_gpu():
    """tests/engine/test_launch_probe_gpu.py ran on the H100 before the discoveries: both launch paths
    named, with static 256+0 and dynamic 0+128 bytes, and the same under synccheck."""
    assert "2 passed" in (FIXTURE / "gpu-tests.txt").read_text()
    assert "program built in 20.7 s" in (FIXTURE / "warm.txt").read_text()
