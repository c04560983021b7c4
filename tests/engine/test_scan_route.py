"""A routed scan (engine.scan.phases, engine.scan.route) against the same scan unrouted, on a staged space.

The stand-in test-backend-ops (tests/scenarios/builds/backend_ops_case_space.py) plays the launch
probe's program: nb=3 cases launch D2's MMA kernel and diverge under the fake sanitizer, nb=32 cases
launch it cleanly, nb=1 cases launch only the vector kernel and its combiner, one case hangs and one
dies of another error; every case run under the sanitizer is written to `sanitized.log`. The space
is scanned unrouted (every case sanitized, the path before routing) and routed; the tests compare
the verdicts case by case and read what each phase ran.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from engine_helpers import ALLOWED, REFUSED
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.phases import entry_kernel_filter, launch_changes, run_phases, why_not_routed
from kvdiag.engine.scan.route import ROUTE_ROUNDS, route_batch_size
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.report.scan_text import render_scan
from kvdiag.store.runs import RunDir
from kvdiag.workspace.kernel_symbols import KernelSymbols
from test_scan import (CRASH, DIVERGING, HANG, NOT_SUPPORTED, OK_CASES, case, scan_scenarios, stage_space)

VEC = "flash_attn_ext_vec<256, 1, (ggml_type)1, (ggml_type)1, false>"
COMBINE = "flash_attn_combine_results<256>"
VEC_CASES = [case("4,1", 512, 1), case("1,1", 1024, 1), case("4,1", 113, 1)]
SPACE = [*DIVERGING, *OK_CASES, HANG, CRASH, *VEC_CASES, *NOT_SUPPORTED]
K44 = "flash_attn_ext_f16<256, 256, 4, 4, false, false>"
K81 = "flash_attn_ext_f16<256, 256, 8, 1, false, false>"


def gate_with(gate):
    return lambda tool: no_sanitizer_gate(tool) if tool is None else gate


@dataclasses.dataclass
class Scans:
    entry: object
    build: Path
    space: object
    direct: object
    routed: object
    filtered: object
    by_kernel: object
    sanitized_direct: list[str]
    sanitized_routed: list[str]
    more_routers: object = None


def sanitized(build: Path, before: int = 0) -> list[str]:
    log = build / "sanitized.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return lines[before:]


def scan_both(entry, target, root: Path, space, **kwargs):
    common = dict(space=space, workers=2, devices=(), batch=0, limit=None, kernel_filter=None,
                  instrument_note="every kernel instrumented", gate_provider=gate_with(ALLOWED))
    common.update(kwargs)
    direct = run_phases(entry, target, RunDir(root / "direct"), not_routed="--no-route", **common)
    routed = run_phases(entry, target, RunDir(root / "routed"), not_routed=None, **common)
    return direct, routed


@pytest.fixture(scope="module")
def scans(tmp_path_factory) -> Scans:
    with scan_scenarios(tmp_path_factory, "scan-route", "D924") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), SPACE)
        listing = KernelSymbols("libggml-cuda.so", "cuobjdump -symbols | c++filt", (K44, K81, VEC, COMBINE))
        probe = dataclasses.replace(
            target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"),
            kernel_symbols=lambda: listing)
        common = dict(space=space, workers=2, devices=(), batch=0, limit=None, gate_provider=gate_with(ALLOWED))
        direct = run_phases(entry, probe, RunDir(root / "direct"), not_routed="--no-route", kernel_filter=None,
                            instrument_note="every kernel instrumented", **common)
        first = sanitized(build)
        routed = run_phases(entry, probe, RunDir(root / "routed"), not_routed=None, kernel_filter=None,
                            instrument_note="every kernel instrumented", **common)
        second = sanitized(build, len(first))
        filtered = run_phases(entry, probe, RunDir(root / "filtered"), not_routed=None,
                              kernel_filter="flash_attn_ext_f16", instrument_note="only D924's kernels", **common)
        by_kernel = run_phases(entry, probe, RunDir(root / "by-kernel"), not_routed=None, kernel_filter=None,
                               instrument_note="", batch_order="by-kernel", **{**common, "batch": 5})
        more_routers = run_phases(entry, probe, RunDir(root / "route-jobs"), not_routed=None, kernel_filter=None,
                                  instrument_note="", route_workers=4, **common)
        yield Scans(entry, build, space, direct, routed, filtered, by_kernel, first, second, more_routers)


def verdicts(result) -> dict[str, Verdict]:
    return {p: a.verdict for p, a in result.results.items()}


def test_routed_and_unrouted_give_every_case_the_same_verdict(scans):
    assert verdicts(scans.routed) == verdicts(scans.direct) == verdicts(scans.filtered) == verdicts(scans.by_kernel)
    assert {p for p, _ in scans.routed.affected} == set(DIVERGING)
    assert {p for p, _ in scans.routed.by_verdict(Verdict.NOT_REPRODUCED)} == set(OK_CASES)
    assert {p for p, _ in scans.routed.by_verdict(Verdict.NOT_APPLICABLE)} == set(VEC_CASES)
    assert {p for p, _ in scans.routed.by_verdict(Verdict.INCONCLUSIVE)} == {HANG, CRASH}
    assert scans.routed.to_dict()["not_run"] == [] and scans.routed.to_dict()["not_supported"] == NOT_SUPPORTED


def test_a_case_that_reaches_no_entry_kernel_is_not_applicable_without_being_sanitized(scans):
    assert set(VEC_CASES) <= set(scans.sanitized_direct)          # the old path sanitized them
    assert not set(VEC_CASES) & set(scans.sanitized_routed)
    a = scans.routed.results[VEC_CASES[0]]
    assert a.reason.startswith("1 matching case(s) executed in launch mode without synccheck (1 OK); "
                               "routed, not sanitized: this case launched no kernel the entry is about "
                               f"(launched: {VEC}, {COMBINE})")
    assert a.evidence.launched == (VEC, COMBINE) and a.evidence.error_count is None
    assert a.evidence.launch_listing == "launch probe (route phase)"
    assert a.commands[0]["argv"][1] == "launch" and "route" in Path(a.commands[0]["stdout_path"]).name
    old = scans.direct.results[VEC_CASES[0]]
    assert old.reason.endswith(f"this case launched no kernel the entry is about (launched: {VEC}, {COMBINE})")


def test_a_case_that_reaches_an_entry_kernel_is_sanitized_and_keeps_its_launch_proof(scans):
    assert set(DIVERGING) | set(OK_CASES) <= set(scans.sanitized_routed)
    clean = scans.routed.results[OK_CASES[0]]
    assert clean.reason.endswith(f"launched under synccheck: {K44}") and clean.evidence.launched == (K44,)
    assert scans.routed.results[next(iter(DIVERGING))].evidence.error_count


def test_route_phase_deaths_are_sanitized_never_dropped(scans):
    route = scans.routed.phases["route"]
    unrouted = route["unrouted"]
    assert set(unrouted) == {HANG, CRASH}
    assert all(why.startswith("the route process ended while running it (route") for why in unrouted.values())
    assert "timed out" in unrouted[HANG] or "no output" in unrouted[HANG]
    assert "SIGABRT" in unrouted[CRASH]
    assert {HANG, CRASH} <= set(scans.sanitized_routed)            # the detect phase ran them, as before
    assert scans.routed.results[CRASH].reason == scans.direct.results[CRASH].reason
    alone = {Path(a.commands[0]["stdout_path"]).name for p, a in scans.routed.results.items() if p in (HANG, CRASH)}
    assert all(name.startswith("case") for name in alone)          # alone from the start: no batch paid for them
    assert scans.routed.ran_alone() < scans.direct.ran_alone()
    rounds = [b["round"] for b in route["batches"]]
    assert max(rounds) > 1 and max(rounds) <= ROUTE_ROUNDS        # the cases after a death routed again


def test_the_scan_records_both_phases(scans):
    phases = scans.routed.to_dict()["phases"]
    route, detect = phases["route"], phases["detect"]
    n = len(scans.space.supported)
    assert phases["path"] == "routed" and phases["why"] is None
    assert route["cases"] == n and route["reached"] == len(DIVERGING) + len(OK_CASES)
    assert route["not_reached"] == len(VEC_CASES) and len(route["unrouted"]) == 2
    assert detect["cases"] == n - len(VEC_CASES)
    assert route["processes"] == len(route["batches"]) and route["processes"] + detect["processes"] == \
        scans.routed.processes
    assert scans.routed.wall_s >= route["wall_s"] + detect["wall_s"] - 0.5
    assert phases["launch_changes"] == [] and phases["launch_changed"] == 0
    direct = scans.direct.to_dict()["phases"]
    assert direct["path"] == "direct" and direct["why"] == "--no-route" and direct["route"] is None
    assert direct["detect"]["cases"] == n and direct["detect"]["processes"] == scans.direct.processes


def test_the_text_says_which_path_ran(scans):
    text = render_scan(scans.routed, Path("/run"))
    assert ("phases: routed: route 13 case(s) in " in text and "3 reach none of D924's kernels (judged without "
            "the sanitizer), 2 unrouted; detect 10 case(s) under the sanitizer in " in text)
    assert "phases: not routed: --no-route\n" in render_scan(scans.direct, Path("/r"))


def test_the_kernel_filter_reaches_the_sanitizer_and_the_record(scans):
    batch = next(a for p, a in scans.filtered.results.items() if p in OK_CASES)
    argv = batch.commands[0]["argv"]
    assert argv[argv.index("--kernel-name") + 1] == "kns=flash_attn_ext_f16"
    assert scans.filtered.phases["kernel_filter"] == "flash_attn_ext_f16"
    assert "(--kernel-name kns=flash_attn_ext_f16)" in scans.filtered.sanitizer_output
    assert "--kernel-name" not in scans.routed.results[OK_CASES[0]].commands[0]["argv"]


def test_a_refused_control_gives_routed_cases_the_unrouted_verdict(tmp_path_factory):
    with scan_scenarios(tmp_path_factory, "scan-route-refused", "D925") as (root, kv, entry):
        cases = [OK_CASES[0], *VEC_CASES[:2]]
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), cases)
        probe = dataclasses.replace(
            target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        direct, routed = scan_both(entry, probe, root, space, gate_provider=gate_with(REFUSED))
    assert verdicts(routed) == verdicts(direct) == dict.fromkeys(cases, Verdict.INCONCLUSIVE)
    assert routed.results[VEC_CASES[0]].reason.endswith(REFUSED.reason)


def test_shards_of_a_routed_scan_partition_the_cases(scans, tmp_path_factory):
    from kvdiag.engine.scan.session import shard_space
    from kvdiag.shards import Shard, case_shard

    with scan_scenarios(tmp_path_factory, "scan-route-shards", "D926") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), [*OK_CASES, *VEC_CASES, *DIVERGING])
        probe = dataclasses.replace(
            target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        parts = []
        for index in (1, 2):
            mine, selection = shard_space(space, None, Shard(index, 2))
            parts.append(run_phases(entry, probe, RunDir(root / f"shard{index}"), space=mine, workers=2, devices=(),
                                    batch=0, limit=None, not_routed=None, kernel_filter=None, instrument_note="",
                                    gate_provider=gate_with(ALLOWED)))
            assert parts[-1].phases["route"]["cases"] == len(mine.supported)
            assert all(case_shard(c, 2) == index for c in parts[-1].results)
    first, second = (set(p.results) for p in parts)
    assert not first & second and first | second == set(space.supported)
    assert {**verdicts(parts[0]), **verdicts(parts[1])} == {p: scans.direct.results[p].verdict
                                                           for p in space.supported}
    from kvdiag.store.scans import SCAN_FORMAT, merge_scans

    docs = []
    for index, part in enumerate(parts, start=1):
        part.shard, part.selection = f"{index}/2", tuple(space.supported)
        docs.append({"format": SCAN_FORMAT, **part.to_dict()})
    merged = merge_scans(docs)
    assert merged["phases"]["path"] == "routed"
    assert merged["phases"]["route"]["cases"] == len(space.supported)
    assert merged["phases"]["route"]["not_reached"] == len(VEC_CASES)
    assert merged["phases"]["detect"]["cases"] == len(space.supported) - len(VEC_CASES)
    assert merged["phases"]["route"]["processes"] == sum(p.phases["route"]["processes"] for p in parts)


def test_why_a_scan_cannot_route(d2):
    launch = {"path": "launch", "why": None}
    assert why_not_routed(d2, launch, True) is None
    assert why_not_routed(d2, launch, False) == "--no-route"
    assert why_not_routed(d2, {"path": "plain", "why": "--program plain"}, True) == (
        "the build's own test-backend-ops lists no kernel launches (--program plain)")
    assert why_not_routed(d2, {"path": "plain", "why": "not a ninja build"}, True).endswith("(not a ninja build)")
    bare = dataclasses.replace(d2, signature=tuple(dataclasses.replace(m, kernel=None) for m in d2.signature))
    assert why_not_routed(bare, launch, True) == "D2's sanitizer signatures name no kernel to route cases to"


def test_the_entry_s_kernel_filter_is_its_family_regex_as_a_mangled_substring(d2):
    assert entry_kernel_filter(d2) == ("flash_attn_ext_f16", "only kernels whose mangled name contains "
                                       "flash_attn_ext_f16 instrumented (from /^flash_attn_ext_f16/)")
    regex = dataclasses.replace(d2, signature=tuple(dataclasses.replace(m, kernel="flash_attn_ext_f16<256")
                                                    for m in d2.signature))
    assert entry_kernel_filter(regex)[0] is None
    assert "are not one plain name" in entry_kernel_filter(regex)[1]


def test_launch_changes_list_kernels_either_phase_saw_alone():
    def attempt(*launched):
        return Attempt("fast", 1, Verdict.NOT_REPRODUCED, "", Evidence(launched=launched, launch_listing="launch probe"))

    route = {"a": (K44,), "b": (K44, "fixup<1>"), "c": (K44,)}
    results = {"a": attempt(K44), "b": attempt(K44), "c": attempt(K44, K81),
               "d": attempt(K81), "e": Attempt("fast", 1, Verdict.CONFIRMED, "", Evidence())}
    assert launch_changes(route, results) == [
        {"case": "b", "only_detect": [], "only_route": ["fixup<1>"]},
        {"case": "c", "only_detect": [K81], "only_route": []}]


def test_route_jobs_sets_the_route_phases_processes_and_nothing_else(scans):
    """--route-jobs 4 beside -j 2: four route processes, the sanitized phase as before, the same verdicts."""
    routed, more = scans.routed.phases, scans.more_routers.phases
    assert (routed["route_workers"], more["route_workers"]) == (2, 4)
    first_round = [sum(1 for b in phases["route"]["batches"] if b["round"] == 1) for phases in (routed, more)]
    assert first_round == [2, 4]
    assert more["detect"]["cases"] == routed["detect"]["cases"]
    assert verdicts(scans.more_routers) == verdicts(scans.routed)
    assert scans.direct.phases["route_workers"] is None


def test_a_routed_scans_own_cpu_counts_the_route_phase_too(tmp_path_factory, monkeypatch):
    """harness_cpu_s of a routed scan starts before the route phase, as its wall does (device session 7's
    routed rows counted the detect phase only)."""
    import itertools

    import kvdiag.engine.scan.phases as phases

    clock = itertools.count(100)
    monkeypatch.setattr(phases.time, "process_time", lambda: float(next(clock)))
    seen: list[float] = []
    real_route = phases.route

    def route(*args, **kwargs):
        seen.append(phases.time.process_time())
        return real_route(*args, **kwargs)

    monkeypatch.setattr(phases, "route", route)
    with scan_scenarios(tmp_path_factory, "scan-route-cpu", "D931") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), [*DIVERGING, *VEC_CASES])
        probe = dataclasses.replace(
            target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"))
        result = run_phases(entry, probe, RunDir(root / "routed"), space=space, workers=2, devices=(), batch=0,
                            limit=None, gate_provider=gate_with(ALLOWED), not_routed=None, kernel_filter=None,
                            instrument_note="")
    assert result.phases["path"] == "routed"
    assert result.cpu_started == 100.0 < seen[0]      # the clock read before the route phase began


def test_route_processes_are_one_per_worker_and_capped():
    assert route_batch_size(2932, 8) == 367 and route_batch_size(20000, 8) == 512
    assert route_batch_size(3, 8) == 1 and route_batch_size(0, 8) == 1


def test_the_benchmark_compares_the_two_paths_case_by_case_and_prints_each_phase(scans, monkeypatch):
    import importlib.util

    from engine_helpers import REPO

    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "benchmarks" / "bench_scan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.parse_variant("8@0,1/32:auto+noroute+entry") == {
        "jobs": "8", "devices": "0,1", "batch": "32", "program": "auto", "options": ("noroute", "entry")}
    assert bench.parse_variant("8@0+noroute")["options"] == ("noroute",)
    assert bench.parse_variant("8@0/128:auto+entry+routej16")["options"] == ("entry", "routej16")
    ran = []

    class Done:
        stdout, returncode, stderr = "{}", 0, ""

    monkeypatch.setattr(bench.subprocess, "run", lambda argv, **kw: ran.append((argv, kw["env"])) or Done())
    bench.scan("B", "D2", 16, "0", None, {"KVDIAG_HOME": "h"}, "128", "auto", "hsk", ("slots16", "overlap"))
    bench.scan("B", "D2", 8, "0", None, {"KVDIAG_HOME": "h"}, "128", "auto", "hsk", ("nooverlap",))
    monkeypatch.undo()
    (argv16, env16), (argv8, env8) = ran
    assert env16 == {"KVDIAG_HOME": "h", "KVDIAG_GPU_SLOTS": "16"} and env8 == {"KVDIAG_HOME": "h"}   # per variant
    assert argv16[-1] == "--overlap" and "slots16" not in " ".join(argv16) and argv8[-1] == "--no-overlap"
    base, routed = scans.direct.to_dict(), scans.routed.to_dict()
    row = bench.summary("2@0:auto", 2, "0", routed, base)
    assert row["affected_identical_to_baseline"] and row["verdicts_identical_to_baseline"]
    assert row["affected_only_in_baseline"] == row["affected_only_here"] == []
    assert row["path"] == "routed" and row["route_cases"] == 13 and row["detect_cases"] == 10
    assert row["route_wall_s"] > 0 and row["detect_wall_s"] > 0 and row["not_reached"] == 3
    assert bench.summary("2@0:auto+noroute", 2, "0", base, None)["not_routed_because"] == "--no-route"


def test_by_kernel_batches_hold_the_cases_that_launched_the_same_kernels(scans):
    log = lambda params: Path(scans.by_kernel.results[params].commands[0]["stdout_path"]).name   # noqa: E731
    k44 = [p for p in [*DIVERGING, *OK_CASES] if "nr23=[4,1]" in p]
    assert len(k44) == 4 and len({log(p) for p in k44}) == 1 and log(k44[0]).startswith("batch")
    assert scans.by_kernel.phases["batch_order"] == "by-kernel" and scans.routed.phases["batch_order"] == "dealt"
    dealt = {Path(scans.routed.results[p].commands[0]["stdout_path"]).name for p in k44}
    assert len(dealt) >= 2                                    # dealt round robin: spread over the batches


def test_ctrl_c_in_the_route_phase_keeps_what_was_routed_and_sanitizes_nothing(tmp_path_factory):
    """A Ctrl-C that lands while the route phase records its cases (here: in on_case) ends the scan:
    the cases judged so far are kept, the others are listed as not run, no case is sanitized."""
    with scan_scenarios(tmp_path_factory, "scan-route-ctrl-c", "D928") as (root, kv, entry):
        build, target, space = stage_space(kv, RunDir(root / "enumerate"), [*VEC_CASES, *OK_CASES])
        probe = dataclasses.replace(
            target, probe_program=lambda: ProbeProgram("test-backend-ops-launch", build / "bin" / "test-backend-ops"))

        def interrupt(params, attempt):
            raise KeyboardInterrupt

        result = run_phases(entry, probe, RunDir(root / "routed"), space=space, workers=1, devices=(), batch=0,
                            limit=None, not_routed=None, kernel_filter=None, instrument_note="",
                            gate_provider=gate_with(ALLOWED), on_case=interrupt)
    assert result.interrupted and result.phases["route"]["cases"] == len(space.supported)
    assert set(result.results) == set(VEC_CASES)                   # the one route process's not-reached cases
    assert set(result.to_dict()["not_run"]) == set(OK_CASES)
    assert result.phases["detect"]["cases"] == 0 and sanitized(build) == []


@pytest.fixture
def cli_scan(kv, monkeypatch):
    """`kvdiag scan` through the CLI on the staged space, the target's GPU replaced; `probe` decides
    whether the launch probe's program exists (the stand-in itself) or not (a build it cannot make)."""
    import kvdiag.engine.scan.session as session
    from engine_helpers import fake_gpu
    from kvdiag.cli import main
    from test_scan import scan_entry_body

    from kvdiag.workspace.launch_lister import LauncherLibrary

    real = session.prepare_target
    made = {"probe": True, "lister": False}
    library = kv.root / "libkvdiag_launches.so"        # the stand-in program acts as if it were loaded
    library.write_text("")

    def prepare(*args, **kwargs):
        target = real(*args, **kwargs)
        program = ProbeProgram("test-backend-ops-launch", target.build.build_dir / "bin" / "test-backend-ops") \
            if made["probe"] else ProbeProgram("test-backend-ops-launch", why_not="not a ninja build")
        lister = LauncherLibrary(library) if made["lister"] else LauncherLibrary(None, "KVDIAG_LAUNCH_LISTER=0")
        return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=fake_gpu()),
                                   probe_program=lambda: program, launch_lister=lambda: lister)

    monkeypatch.setattr(session, "prepare_target", prepare)
    monkeypatch.setattr(session, "controls_gate_provider", lambda home, target, log_dir: gate_with(ALLOWED))
    kv.entry("D929", scan_entry_body(30))
    build = kv.build("backend_ops_case_space")
    (build / "case-space.txt").write_text("\n".join([*OK_CASES[:2], *VEC_CASES[:2], *DIVERGING][:7]) + "\n")
    sanitizer = kv.sanitizer()

    def run(*argv, probe=True, lister=False):
        made["probe"], made["lister"] = probe, lister
        return main(["--registry", str(kv.registry_dir), "scan", "D929", "--build", str(build), "--sanitizer",
                     str(sanitizer), "-j", "2", *argv])

    return run


def test_without_the_probe_the_cupti_lister_routes_and_names_each_cases_kernels(cli_scan, capsys, kv):
    """ggml v0.9.7's test-backend-ops takes no launch probe patch: the build's own program routes in
    test mode under the CUPTI lister, and the sanitized cases are named by what the route saw."""
    import json

    from kvdiag.parse.launches import canonical

    assert cli_scan("--format", "json", probe=False, lister=True) == 1
    scan = json.loads(capsys.readouterr().out)
    assert scan["program"]["path"] == "test+cupti" and scan["program"]["why"] == "not a ninja build"
    assert scan["phases"]["path"] == "routed" and scan["phases"]["route"]["not_reached"] == 2
    listings = {c.get("launch_listing") for c in scan["cases"].values()}
    assert listings == {"CUPTI injection (route phase)", "CUPTI injection (route phase, without the sanitizer)"}
    confirmed = [c for c in scan["cases"].values() if c["verdict"] == "confirmed"]
    assert confirmed and all(c["launched"] == [canonical(c["instantiations"][-1])] for c in confirmed)
    build = next(p for p in kv.root.rglob("modes.log"))
    assert "launch" not in build.read_text().split()            # the build's own program has no launch mode


def test_the_cli_routes_by_default_and_says_why_when_it_cannot(cli_scan, capsys):
    import json

    assert cli_scan("--format", "json") == 1
    routed = json.loads(capsys.readouterr().out)
    assert routed["phases"]["path"] == "routed" and routed["phases"]["route"]["not_reached"] == 2
    assert cli_scan("--format", "json", "--no-route", "--instrument", "entry", "--batch-order", "by-kernel") == 1
    direct = json.loads(capsys.readouterr().out)
    assert direct["phases"]["path"] == "direct" and direct["phases"]["why"] == "--no-route"
    assert direct["phases"]["kernel_filter"] == "flash_attn_ext_f16" and direct["phases"]["batch_order"] == "dealt"
    assert {p: c["verdict"] for p, c in routed["cases"].items()} == {p: c["verdict"] for p, c in direct["cases"].items()}
    assert cli_scan(probe=False) == 1
    out, err = capsys.readouterr()
    assert ("kvdiag: not routed: the build's own test-backend-ops lists no kernel launches (not a ninja build; "
            "KVDIAG_LAUNCH_LISTER=0); every case runs under the sanitizer") in err
    assert ("phases: not routed: the build's own test-backend-ops lists no kernel launches (not a ninja build; "
            "KVDIAG_LAUNCH_LISTER=0)") in out


def test_a_benchmark_variant_that_gives_no_record_is_a_row_and_the_next_variants_still_run(scans, monkeypatch, capsys):
    """Session 31's bench lost its last variant to the one before it (`--batch 226`, over the CLI's bound)."""
    import importlib.util

    from engine_helpers import REPO

    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "benchmarks" / "bench_scan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    routed = scans.routed.to_dict()
    ran = []

    def fake_scan(build, entry, jobs, devices, limit, env, batch="", program="", params=None, options=(), op=None):
        ran.append(batch)
        if batch == "226":
            raise bench.VariantFailed("scan 2@0/226 gave no JSON (rc 64): kvdiag: --batch 226: out of range")
        return routed

    monkeypatch.setattr(bench, "scan", fake_scan)
    monkeypatch.setattr(sys, "argv", ["bench_scan.py", "--build", "b", "--variant", "2@0:auto",
                                      "--variant", "2@0/226:auto", "--variant", "2@0/5:auto"])
    assert bench.main() == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert ran == ["1", "", "226", "5"]                         # the warm-up, then every variant
    assert [row["variant"] for row in rows] == ["warm-up", "2@0:auto", "2@0/226:auto", "2@0/5:auto"]
    assert rows[2] == {"variant": "2@0/226:auto", "error": "scan 2@0/226 gave no JSON (rc 64): kvdiag: --batch 226: "
                                                           "out of range"}
    assert rows[3]["speedup"] == 1.0


def test_bench_scan_passes_op_to_every_scan_for_an_entry_that_declares_no_case_space(monkeypatch, capsys, scans):
    """Session 32's bench of D1 stopped at its warm-up: D1 declares no case space, and the bench had no --op."""
    import importlib.util
    import subprocess

    from engine_helpers import REPO

    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "benchmarks" / "bench_scan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argvs = []

    def fake_run(argv, **kwargs):
        argvs.append(argv)
        return subprocess.CompletedProcess(argv, 1, stdout=json.dumps(scans.routed.to_dict()), stderr="")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["bench_scan.py", "--build", "b", "--entry", "D1", "--op", "FLASH_ATTN_EXT",
                                      "--params", "hsk=320", "--variant", "9@0/1", "--variant", "9@0/16"])
    assert bench.main() == 0
    assert len(argvs) == 3                                      # the warm-up, then each variant
    for argv in argvs:
        assert argv[argv.index("--op") + 1] == "FLASH_ATTN_EXT" and argv[argv.index("--params") + 1] == "hsk=320"
    assert [argv[argv.index("--batch") + 1] for argv in argvs] == ["1", "1", "16"]
