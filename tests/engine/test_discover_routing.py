"""Racecheck's routing by shared memory (kvdiag.engine.discover.routing), piece by piece: which tools
are routed and from whose launches, when an op's racecheck processes are released, which cases are
spared, and the benchmark's check that a spared case never hid a finding."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvdiag.engine.discover.batch import ROUTE, Unit
from kvdiag.engine.discover.cases import ABORTED, CLEAN, CUT, FINDINGS, SPARED, CaseRecord
from kvdiag.engine.discover.routing import SharedMemoryRouter, holds_no_shared_memory, plan_routing


def test_the_first_other_tool_lists_the_launches_else_a_route_pass():
    assert plan_routing(("racecheck", "synccheck", "memcheck"), "launch").source == "synccheck"
    assert plan_routing(("memcheck", "racecheck"), "launch").source == "memcheck"
    alone = plan_routing(("racecheck",), "launch")
    assert (alone.routed, alone.source, alone.active) == (("racecheck",), ROUTE, True)
    assert "a route pass without a sanitizer" in alone.why


def test_no_routing_without_racecheck_without_the_probe_or_when_asked():
    assert not plan_routing(("synccheck", "memcheck"), "launch").active
    plain = plan_routing(("racecheck", "synccheck"), "test")
    assert not plain.active and "does not print its launches' shared memory" in plain.why
    asked = plan_routing(("racecheck",), "launch", route=False)
    assert not asked.active and asked.why.startswith("--no-route")


def record(params: str, state: str = CLEAN, launches: int | None = 2, shared: int | None = 0,
           tool: str = "synccheck", op: str = "ADD") -> CaseRecord:
    return CaseRecord(tool=tool, op=op, params=params, state=state, status="OK", launches=launches,
                      shared_memory=shared, log="synccheck-00001.stdout.log", lines=(1, 3))


def test_only_a_case_listed_to_its_status_with_no_shared_memory_is_spared():
    assert holds_no_shared_memory(record("a"))
    assert not holds_no_shared_memory(record("a", launches=0, shared=0))  # no launch seen: the probe may be blind
    failed = CaseRecord(tool="synccheck", op="ADD", params="a", state=CLEAN, status="FAIL", launches=2, shared_memory=0)
    assert not holds_no_shared_memory(failed)                            # did not end OK: its listing may stop short
    assert holds_no_shared_memory(record("a", state=FINDINGS))           # synccheck's finding: racecheck still blind
    assert not holds_no_shared_memory(record("a", shared=48))
    assert not holds_no_shared_memory(record("a", shared=None))          # a launch that did not say (cuBLAS)
    assert not holds_no_shared_memory(record("a", launches=None, shared=None))   # not listed
    assert not holds_no_shared_memory(record("a", state=ABORTED))
    assert not holds_no_shared_memory(record("a", state=CUT, launches=None, shared=None))


def test_a_batch_goes_as_soon_as_it_is_full_and_an_ops_rest_once_its_listing_ended():
    plan = plan_routing(("racecheck", "synccheck"), "launch")
    router = SharedMemoryRouter(plan, {"ADD": ("a", "b", "c", "d", "e"), "CPY": ("x",)},
                                batch_size=lambda cases: 2 if len(cases) == 5 else 99)
    units, spared = router.take([record("a", shared=16), record("b"), record("x", op="CPY", shared=None)])
    assert units == [Unit("racecheck", "CPY", ("x",))]                   # CPY is whole; ADD's batch is not full
    assert [(r.params, r.state, r.tool) for r in spared] == [("b", SPARED, "racecheck")]
    assert "its synccheck process listed 2 launch(es), none holding shared memory" in spared[0].why
    units, spared = router.take([record("d", state=CUT, launches=None, shared=None), record("c", shared=1),
                                 record("c", tool="racecheck")])         # another tool's record is not a listing
    # a, d and c need racecheck, a batch's worth before ADD's listing ended: all three go, dealt over two
    assert units == [Unit("racecheck", "ADD", ("a", "c")), Unit("racecheck", "ADD", ("d",))]
    units, spared = router.take([record("e")])                          # e spared, the listing ends: nothing left
    assert units == [] and [r.params for r in spared] == ["e"]
    assert router.counts == {"sanitized": 4, "spared": 2}
    assert router.take([record("a")]) == ([], [])                        # a case listed twice counts once


def test_one_listing_processs_cases_are_dealt_so_its_heaviest_do_not_share_a_process():
    """A listing process gives its cases small to large; racecheck's batches each get a share of the large."""
    rows = tuple(f"ne=[{1 << i},1,1,1]" for i in range(8))
    router = SharedMemoryRouter(plan_routing(("racecheck",), "launch"), {"TOP_K": rows + ("z",)},
                                batch_size=lambda cases: 4)
    units, _ = router.take([record(p, tool=ROUTE, op="TOP_K", shared=64) for p in rows])
    assert [u.cases for u in units] == [rows[0::2], rows[1::2]]
    units, _ = router.take([record("z", tool=ROUTE, op="TOP_K", shared=64)])      # the op's last case, alone
    assert [u.cases for u in units] == [("z",)]


def test_a_route_pass_names_itself_in_the_reason():
    router = SharedMemoryRouter(plan_routing(("racecheck",), "launch"), {"ADD": ("a",)}, batch_size=lambda c: 32)
    units, spared = router.take([record("a", tool=ROUTE, launches=3)])
    assert units == [] and spared[0].why == ("not run under racecheck: the route pass listed 3 launch(es), none "
                                            "holding shared memory; racecheck sees only shared memory")


def test_the_benchmark_counts_a_spared_case_the_other_arm_found_something_in():
    spec = importlib.util.spec_from_file_location(
        "bench_discover", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_discover.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    finding = {"kind": "race", "file": "a.cu", "line": 1, "function": "k", "kernel": "k", "peer": None}

    def doc(*cases):
        return {"tools": ["racecheck"], "space": {"ops": {"ADD": 3}}, "processes": [],
                "cases": [{"tool": "racecheck", "op": "ADD", "params": p, "state": s, "findings": f}
                          for p, s, f in cases]}

    routed = doc(("a", "spared", []), ("b", "spared", []), ("c", "findings", [finding]))
    unrouted = doc(("a", "clean", []), ("b", "findings", [finding]), ("c", "findings", [finding]))
    compared = bench.compare_arms(unrouted, routed, names=("no-route", "route"))
    assert (compared["agree"], compared["spared_with_findings"]) == (2, 1)
    assert compared["spared"] == {"no-route": 0, "route": 2}


def test_the_benchmark_reads_counted_arm_suffixes_and_refuses_unknown_ones():
    spec = importlib.util.spec_from_file_location(
        "bench_discover", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_discover.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.arm_flags("auto") == ("auto", [])
    assert bench.arm_flags("auto:racecheck-workers-1:jobs-16") == (
        "auto", ["--racecheck-workers", "1", "-j", "16"])
    assert bench.arm_flags("plain:no-route:backtrace-no") == ("plain", ["--no-route", "--backtrace", "no"])
    with pytest.raises(SystemExit, match="unknown suffix 'workers-2'"):
        bench.arm_flags("auto:workers-2")
