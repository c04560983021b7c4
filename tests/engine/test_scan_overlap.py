"""An overlapped routed scan (engine.scan.overlap) against the same scan with its phases one after the other.

The staged space of test_scan_route (the stand-in test-backend-ops playing the launch probe's
program: diverging, clean, vector-only, a hang and a crash) is scanned routed both ways; every case
must come out the same, the same cases be sanitized and the record be the same but for the walls.
The DetectBatcher is read on its own (which cases go when), and the overlap itself is shown on the
replayed H200 space of test_scan_route_recorded: a later route process waits until a detect process
has started, which only an overlapped scan can give it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

import kvdiag.engine.scan.cases as scan_mod
import kvdiag.engine.scan.overlap as overlap_mod
import kvdiag.engine.scan.route as route_mod
from engine_helpers import ALLOWED
from kvdiag.engine.scan.dispatch import UnitFeed
from kvdiag.engine.scan.cases import units_of
from kvdiag.engine.scan.overlap import DetectBatcher
from kvdiag.engine.scan.phases import run_phases
from kvdiag.engine.scan.route import RoutedBatch, RouteOutcome
from kvdiag.records.verdict import Verdict
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.report.scan_text import render_scan
from kvdiag.store.runs import RunDir
from test_scan import CRASH, DIVERGING, HANG, OK_CASES, scan_scenarios, stage_space
from test_scan_route import SPACE, VEC_CASES, gate_with, sanitized

LIMIT_S = 120
WALLS = ("wall_s",)


@dataclasses.dataclass
class Pair:
    space: object
    one_after: object      # the phases one after the other
    overlapped: object
    by_kernel: object      # overlapped, by-kernel, small route processes
    sanitized_one_after: list[str]
    sanitized_overlapped: list[str]


def probe_target(build, target):
    return dataclasses.replace(
        target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Pair:
    with scan_scenarios(tmp_path_factory, "scan-overlap", "D933") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), SPACE)
        probe = probe_target(build, target)
        common = dict(space=space, workers=2, devices=(), batch=0, limit=None, gate_provider=gate_with(ALLOWED),
                      not_routed=None, kernel_filter=None, instrument_note="every kernel instrumented")
        one_after = run_phases(entry, probe, RunDir(root / "one-after"), **common)
        first = sanitized(build)
        overlapped = run_phases(entry, probe, RunDir(root / "overlapped"), overlap=True, **common)
        second = sanitized(build, len(first))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(overlap_mod, "OVERLAP_ROUTE_BATCH", 3)
            by_kernel = run_phases(entry, probe, RunDir(root / "by-kernel"), overlap=True, batch_order="by-kernel",
                                   **common)
        yield Pair(space, one_after, overlapped, by_kernel, first, second)


def verdicts(result) -> dict[str, Verdict]:
    return {p: a.verdict for p, a in result.results.items()}


def without(d: dict, keys) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def test_overlapped_and_one_after_the_other_judge_every_case_alike(pair):
    assert verdicts(pair.overlapped) == verdicts(pair.one_after) == verdicts(pair.by_kernel)
    assert {p for p, _ in pair.overlapped.affected} == set(DIVERGING)
    assert {p for p, _ in pair.overlapped.by_verdict(Verdict.NOT_APPLICABLE)} == set(VEC_CASES)
    assert {p: a.reason for p, a in pair.overlapped.results.items()} == \
        {p: a.reason for p, a in pair.one_after.results.items()}
    for result in (pair.overlapped, pair.by_kernel):
        data = result.to_dict()
        assert data["not_run"] == [] and data["not_supported"] == pair.one_after.to_dict()["not_supported"]
        assert result.space is pair.space and not result.interrupted


def test_the_same_cases_are_sanitized_and_the_vector_only_ones_are_not(pair):
    assert set(pair.sanitized_overlapped) == set(pair.sanitized_one_after)
    assert not set(VEC_CASES) & set(pair.sanitized_overlapped)
    alone = {a.commands[0]["stdout_path"].rpartition("/")[2] for p, a in pair.overlapped.results.items()
             if p in (HANG, CRASH)}
    assert all(name.startswith("case") for name in alone)     # alone from the start, as RouteOutcome.alone says


def test_the_record_is_the_same_but_for_the_overlap_and_the_walls(pair):
    one, over = pair.one_after.phases, pair.overlapped.phases
    assert (one["overlap"], over["overlap"]) == (False, True)
    assert without(over, ("overlap", "route", "detect")) == without(one, ("overlap", "route", "detect"))
    rows = lambda phases: [without(b, WALLS + ("exit", "log")) for b in phases["route"]["batches"]]   # noqa: E731
    assert without(over["route"], WALLS + ("batches", "unrouted")) == \
        without(one["route"], WALLS + ("batches", "unrouted"))
    assert set(over["route"]["unrouted"]) == set(one["route"]["unrouted"]) == {HANG, CRASH}
    assert sorted(map(str, rows(over))) == sorted(map(str, rows(one)))
    assert over["detect"]["cases"] == one["detect"]["cases"] == len(pair.space.supported) - len(VEC_CASES)
    assert over["route"]["processes"] + over["detect"]["processes"] == pair.overlapped.processes
    for result in (pair.overlapped, pair.by_kernel):
        phases = result.phases
        assert result.wall_s >= max(phases["route"]["wall_s"], phases["detect"]["wall_s"]) - 0.01
        assert phases["detect"]["wall_s"] > 0


def test_small_route_processes_still_route_every_case_once(pair):
    route = pair.by_kernel.phases["route"]
    first_round = [b for b in route["batches"] if b["round"] == 1]
    assert all(b["cases"] <= 3 for b in first_round) and len(first_round) >= 5
    assert route["reached"] == len(DIVERGING) + len(OK_CASES) and route["not_reached"] == len(VEC_CASES)
    assert pair.by_kernel.phases["batch_order"] == "by-kernel"


def test_the_text_says_the_phases_overlapped(pair):
    from pathlib import Path

    text = render_scan(pair.overlapped, Path("/run"))
    assert "phases: routed, overlapped: route 13 case(s) in " in text
    assert "phases: routed: route 13 case(s) in " in render_scan(pair.one_after, Path("/run"))


# ------------------------------------------------------------------ the batcher alone

K1, K2, K3 = ("k1<1>",), ("k2<2>",), ("k3<3>",)
CASES = tuple("abcdefghij")


def answer(reached=(), launched=None, unrouted=None, not_started=None) -> RoutedBatch:
    return RoutedBatch(reached=list(reached), launched=dict(launched or {}), unrouted=dict(unrouted or {}),
                       not_started=not_started)


def batcher(size: int, by_kernel: bool) -> DetectBatcher:
    return DetectBatcher(UnitFeed(), CASES, size, by_kernel)


def names(units) -> list[list[str]]:
    return [[case for _, case in unit] for unit in units]


def test_by_kernel_a_group_goes_when_it_fills_a_batch_and_the_rest_when_routing_ends():
    b = batcher(2, by_kernel=True)
    b.take(answer(reached="ab", launched={"a": K1, "b": K2}, unrouted={"c": "the route process ended while running it"}))
    assert names(b.feed.take()) == [["c"]]                    # seen to end its route process: alone, at once
    b.take(answer(reached="d", launched={"d": K1}))
    assert b.feed.take() == [[(1, "a"), (4, "d")]]            # K1 filled a batch: numbered from the listing
    b.take(answer(unrouted={"e": "could not start", "f": "could not start"}, not_started="E2BIG"))
    assert names(b.feed.take()) == [["e", "f"]]               # not started: batched, not alone
    b.take(answer(reached="g", launched={"g": K2}))
    assert names(b.feed.take()) == [["b", "g"]]
    b.take(answer(reached="h", launched={"h": K3}))
    assert b.feed.take() == []
    b.flush()
    assert names(b.feed.take()) == [["h"]]
    assert sorted(b.sent) == sorted("abcdefgh") and b.first_sent is not None


def test_by_kernel_when_batches_wait_unfilled_one_goes_from_the_largest_groups():
    """The H200's scan: no group filled a batch before routing ended. Two batches' worth waiting: one goes."""
    b = batcher(3, by_kernel=True)
    b.take(answer(reached="abcde", launched={"a": K2, "b": K1, "c": K3, "d": K1, "e": K2}))
    assert b.feed.take() == []                                 # 5 waiting, fewer than 2 batches of 3
    b.take(answer(reached="f", launched={"f": K3}))
    assert names(b.feed.take()) == [["a", "b", "d"]]          # K1's b, d whole (largest, then by key), K2's a first
    b.take(answer(reached="g", launched={"g": K2}))
    assert names(b.feed.take()) == []                          # e, g (K2) and c, f (K3): 4 waiting
    b.flush()
    assert names(b.feed.take()) == [["c", "e", "g"], ["f"]]   # by key (K2's e, g; K3's c), in listing order
    assert sorted(b.sent) == sorted("abcdefg")


def test_dealt_batches_fill_in_arrival_order():
    b = batcher(3, by_kernel=False)
    b.take(answer(reached="jb", launched={"j": K1, "b": K2}))
    b.take(answer(reached="ac", launched={"a": K3, "c": K1}))
    assert names(b.feed.take()) == [["a", "b", "j"]]          # the first three to arrive, in the listing's order
    b.flush()
    assert names(b.feed.take()) == [["c"]]


def test_what_waits_when_routing_ends_is_batched_as_the_one_after_the_other_path_batches_it():
    """No group filled a batch: the batches are those of the sequential by-kernel path (sorted by the
    kernels launched, then the listing's order, cut consecutively)."""
    launched = {"a": K2, "b": K1, "c": K3, "d": K1, "f": K2, "h": K3, "i": K1}
    b = batcher(4, by_kernel=True)
    b.take(answer(reached="cfa", launched=launched))
    b.take(answer(reached="ihbd", launched=launched))
    assert b.feed.take() == []
    b.flush()
    numbered = list(enumerate(CASES, start=1))
    detect = [case for case in numbered if case[1] in launched]
    ordered = sorted(detect, key=lambda case: sorted(launched[case[1]]))
    assert [sorted(u) for u in b.feed.take()] == [sorted(u) for u in units_of(ordered, 4, (), True)]


def test_size_one_sends_every_case_at_once():
    b = batcher(1, by_kernel=True)
    b.take(answer(reached="ab", launched={"a": K1, "b": K1}))
    assert names(b.feed.take()) == [["a"], ["b"]]


# ------------------------------------------------------------------ errors and Ctrl-C

def in_thread(fn):
    box: dict = {}

    def body():
        try:
            box["result"] = fn()
        except BaseException as exc:    # noqa: BLE001 - the test reads it
            box["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(LIMIT_S)
    assert not thread.is_alive(), f"the scan did not end in {LIMIT_S} s"
    return box


@pytest.fixture
def small(tmp_path_factory):
    with scan_scenarios(tmp_path_factory, "scan-overlap-small", "D934") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), [*VEC_CASES, *OK_CASES])
        probe = probe_target(build, target)

        def run(name, **kwargs):
            args = dict(space=space, workers=1, devices=(), batch=0, limit=None, not_routed=None, kernel_filter=None,
                        instrument_note="", gate_provider=gate_with(ALLOWED), overlap=True)
            args.update(kwargs)
            return run_phases(entry, probe, RunDir(root / name), **args)

        yield run, build, space


@pytest.mark.parametrize("hands_over", [False, True])
def test_an_error_in_the_route_thread_ends_the_scan_with_it(small, monkeypatch, hands_over):
    """The route phase breaks (after handing a batch to the detect phase, or before): the scan raises
    its error once the detect phase has ended, and does not wait for ever on a feed nobody closes."""
    run, _, space = small

    def broken(*args, on_batch=None, **kwargs):
        if hands_over:
            on_batch(RoutedBatch(reached=[OK_CASES[0]], launched={OK_CASES[0]: K1}))
            time.sleep(0.2)
        raise RuntimeError("the route phase broke")

    monkeypatch.setattr(overlap_mod, "route", broken)
    box = in_thread(lambda: run(f"broken-{hands_over}"))
    assert isinstance(box.get("error"), RuntimeError) and str(box["error"]) == "the route phase broke"


def test_an_error_in_the_detect_phase_stops_the_route_thread(small, monkeypatch):
    run, _, _ = small
    seen: list[threading.Event] = []
    real_route = overlap_mod.route

    def route(*args, cancel, **kwargs):
        seen.append(cancel)
        return real_route(*args, cancel=cancel, **kwargs)

    def broken_scan(*args, **kwargs):
        raise ValueError("the detect phase broke")

    monkeypatch.setattr(overlap_mod, "route", route)
    monkeypatch.setattr(overlap_mod, "scan", broken_scan)
    box = in_thread(lambda: run("detect-broken"))
    assert isinstance(box.get("error"), ValueError)
    assert seen and seen[0].is_set()                          # the route phase was told to stop, and joined
    assert not [t for t in threading.enumerate() if t.name == "kvdiag-route-phase"]


def test_ctrl_c_in_the_route_phase_of_an_overlapped_scan_sanitizes_nothing(small):
    """As test_scan_route's: a Ctrl-C while the route phase records its cases keeps what it judged."""
    run, build, space = small
    before = len(sanitized(build))

    def interrupt(params, attempt):
        raise KeyboardInterrupt

    box = in_thread(lambda: run("ctrl-c-route", on_case=interrupt))
    result = box["result"]
    assert result.interrupted and result.phases["overlap"] is True
    assert set(result.results) == set(VEC_CASES)
    assert set(result.to_dict()["not_run"]) == set(OK_CASES)
    assert result.phases["detect"]["cases"] == 0 and sanitized(build, before) == []


def test_ctrl_c_in_the_detect_phase_keeps_every_finished_case(small):
    """A Ctrl-C as the first sanitized case is recorded: that case and its batch are kept (salvaged),
    the routed ones too; the others are listed as not run, none lost."""
    run, _, space = small
    hit: list[str] = []

    def interrupt(params, attempt):
        if attempt.evidence.launch_listing != "launch probe (route phase)" and not hit:
            hit.append(params)
            raise KeyboardInterrupt

    box = in_thread(lambda: run("ctrl-c-detect", on_case=interrupt, batch=2))
    result = box["result"]
    assert result.interrupted and hit
    assert hit[0] in result.results and result.results[hit[0]].verdict is Verdict.NOT_REPRODUCED
    assert set(VEC_CASES) <= set(result.results)
    assert set(result.results) | set(result.to_dict()["not_run"]) == set(space.supported)


# ------------------------------------------------------------------ the overlap itself, on the replayed space

def test_detect_starts_while_cases_are_still_being_routed(tmp_path_factory, monkeypatch):
    """On the replayed H200 space (every 60th case): route processes of 4 cases, one at a time; from the
    third on, each waits (at most 10 s) for a detect process to have started. One after the other, none
    could have; overlapped, each finds one running, and every case comes out as the H200 recorded it."""
    from engine_helpers import REGISTRY, read_recorded
    from kvdiag.controls.gate import no_sanitizer_gate
    from kvdiag.engine.scan.cases import enumerate_cases
    from kvdiag.registry.loader import load_registry
    from test_scan_route_recorded import EVERY, RECORDED, launches_of

    detect_started = threading.Event()
    waited: list[bool] = []
    real_route_batch, real_run_batch, real_attempt = route_mod.route_batch, scan_mod.run_batch, scan_mod.attempt_step

    def route_batch(*args, number, **kwargs):
        if number >= 3:
            waited.append(detect_started.wait(10))
        return real_route_batch(*args, number=number, **kwargs)

    def run_batch(*args, **kwargs):
        detect_started.set()
        return real_run_batch(*args, **kwargs)

    def attempt_step(*args, **kwargs):
        detect_started.set()
        return real_attempt(*args, **kwargs)

    monkeypatch.setattr(route_mod, "route_batch", route_batch)
    monkeypatch.setattr(scan_mod, "run_batch", run_batch)
    monkeypatch.setattr(scan_mod, "attempt_step", attempt_step)
    monkeypatch.setattr(overlap_mod, "OVERLAP_ROUTE_BATCH", 4)
    recorded = json.loads(read_recorded(RECORDED))
    chosen = {p: recorded["cases"][p] for p in sorted(recorded["cases"])[::EVERY]}
    d2 = load_registry(REGISTRY).get("D2")
    with scan_scenarios(tmp_path_factory, "scan-overlap-recorded", "D935") as (root, kv, _):
        build = kv.build("backend_ops_replays_h200_scan")
        (build / "replay.json").write_text(json.dumps({
            p: {"launches": launches_of(c), "findings": c["instantiations"] if c["verdict"] == "confirmed" else []}
            for p, c in chosen.items()}))
        target = probe_target(build, kv.target(build, sanitizer=kv.sanitizer()))
        space = enumerate_cases(target, "FLASH_ATTN_EXT", "hsk", RunDir(root / "enumerate"))
        box = in_thread(lambda: run_phases(
            d2, target, RunDir(root / "overlapped"), space=space, workers=2, route_workers=1, devices=(), batch=2,
            limit=None, not_routed=None, kernel_filter=None, instrument_note="", overlap=True,
            gate_provider=lambda tool: no_sanitizer_gate(tool) if tool is None else ALLOWED))
    result = box["result"]
    assert len(waited) >= 8 and all(waited)
    assert {p: a.verdict.value for p, a in result.results.items()} == {p: c["verdict"] for p, c in chosen.items()}
    reaching = {p for p, c in chosen.items() if c["verdict"] != "not-applicable"}
    assert result.phases["detect"]["cases"] == len(reaching) and result.phases["route"]["unrouted"] == {}
    outcome = RouteOutcome()
    assert outcome.summary("D2", 0).startswith("route: 0 case(s) reach D2's kernels")


# ------------------------------------------------------------------ the command line

from test_scan_route import cli_scan  # noqa: E402,F401 - the fixture: `kvdiag scan` on a staged space


def test_the_cli_overlaps_with_overlap_only_and_never_unrouted(cli_scan, capsys):
    """Off by default: on the H200 (device session 9) the overlapped scan took 67.4 s against 67.0 s."""
    assert cli_scan("--overlap") == 1
    out, err = capsys.readouterr()
    assert "phases: routed, overlapped: route 7 case(s) in " in out
    assert "as soon as its cases are routed (--overlap)" in err
    assert cli_scan("--format", "json", "--overlap") == 1
    overlapped = json.loads(capsys.readouterr().out)
    assert cli_scan("--format", "json") == 1
    one_after = json.loads(capsys.readouterr().out)
    assert (overlapped["phases"]["overlap"], one_after["phases"]["overlap"]) == (True, False)
    assert {p: c["verdict"] for p, c in overlapped["cases"].items()} == \
        {p: c["verdict"] for p, c in one_after["cases"].items()}
    assert overlapped["phases"]["detect"]["cases"] == one_after["phases"]["detect"]["cases"] == 5
    assert cli_scan("--overlap", probe=False) == 1                 # not routed: the flag changes nothing
    out, err = capsys.readouterr()
    assert "overlap" not in err and "phases: not routed: " in out and "overlapped" not in out


def test_merged_shards_are_overlapped_only_if_every_shard_was():
    from kvdiag.store.scans import merged_phases

    def shard(**more):
        return {"phases": {"path": "routed", "route": {"cases": 2, "processes": 1, "wall_s": 1.0}, "detect": {
            "cases": 1, "processes": 1, "wall_s": 2.0}, **more}}

    assert merged_phases([shard(overlap=True), shard(overlap=True)])["overlap"] is True
    assert merged_phases([shard(overlap=True), shard(overlap=False)])["overlap"] is False
    assert merged_phases([shard(overlap=True), shard()])["overlap"] is False    # one saved before --overlap
    assert "overlap" not in merged_phases([shard(), shard()])


# ------------------------------------------------------------------ a real Ctrl-C

def test_sigint_while_route_processes_hang_ends_both_phases_and_keeps_what_finished(kv):
    """SIGINT reaches the calling thread (the detect phase) while two route processes hang: exit 130 without
    a traceback, the cases sanitized meanwhile kept, the hanging route processes and their children
    ended, their cases listed as not run."""
    from engine_helpers import pid_gone, wait_until
    from test_scan import case, interrupt_scan_driver, recorded_pids, scan_entry_body

    ok = [case("4,1", 512, 32), case("1,1", 512, 32)]
    hangs = [case("4,1", kv_, 512) for kv_ in (113, 1024, 2048, 4096)]
    listing = [ok[0], hangs[0], hangs[1], ok[1], hangs[2], hangs[3]]   # dealt by 2: ok cases in route001
    entry = kv.entry("D936", scan_entry_body(120))
    build = kv.build("backend_ops_case_space")
    (build / "case-space.txt").write_text("\n".join(listing) + "\n")
    run_dir, out_json = kv.root / "overlap-interrupted", kv.root / "overlap-result.json"
    finished: list[dict] = []
    sanitized_ok = lambda: {f["case"] for f in finished if f["verdict"] == "not-reproduced"} == set(ok)  # noqa: E731
    code, err = interrupt_scan_driver(kv, build, entry.id, run_dir, out_json, finished, "overlap",
                                      ready=lambda grandchildren: sanitized_ok() and len(grandchildren()) >= 2,
                                      timeout=60, what="no two sanitized cases and two hangs")
    assert code == 130, err
    assert "Traceback" not in err
    data = json.loads(out_json.read_text())
    assert data["interrupted"] is True and data["phases"]["overlap"] is True
    assert {p: c["verdict"] for p, c in data["cases"].items()} == dict.fromkeys(ok, "not-reproduced")
    assert sorted(data["not_run"]) == sorted(hangs)
    leaders = [json.loads(f.read_text()).get("pid") for f in (run_dir / "logs").glob("*.cmd.json")]
    pids = recorded_pids(build) + [p for p in leaders if p]
    assert len(list((build / "pids").glob("*.grandchild"))) >= 2
    assert wait_until(lambda: all(pid_gone(p) for p in pids), 10), [p for p in pids if not pid_gone(p)]
