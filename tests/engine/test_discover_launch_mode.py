"""`kvdiag discover` on the launch probe's program: sanitized cases in its GPU-only `launch` mode,
and the numeric test of the cases with findings in test mode on the user's own program.

The staged build (tests/scenarios/builds/backend_ops_suite.py) stands for both programs here: its
`launch` mode prints OK where test mode FAILs (no comparison), and it logs each process's mode and
tool to `<build>/modes.log`, so the tests see which program ran what.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import Scenarios, make_target  # noqa: E402
from test_discover import staged_build  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from isolation import isolate  # noqa: E402

from kvdiag.cli import main
from kvdiag.controls.gate import Gate
from kvdiag.engine.discover import session as discover_session
from kvdiag.engine.discover.program import LAUNCH, TEST, choose_program
from kvdiag.engine.discover.result import from_document
from kvdiag.probes.program_rebuild import ProbeProgram


def discover(tmp_path: Path, monkeypatch, *args: str, staged=lambda build: None) -> tuple[dict, list[str], int]:
    isolate(monkeypatch, tmp_path)
    kv = Scenarios(tmp_path / "kv")
    build = staged_build(kv)
    staged(build)
    program = build / "bin" / "test-backend-ops"
    target = make_target(build, log_dir=tmp_path / "target-logs", sanitizer=kv.sanitizer())
    made = ProbeProgram("test-backend-ops-launch", path=program, reused=True)
    target = dataclasses.replace(target, probe_program=lambda: made)
    monkeypatch.setattr(discover_session, "prepare_target", lambda *a, **k: target)
    monkeypatch.setattr(discover_session, "controls_gate_provider",
                        lambda *a, **k: (lambda tool: Gate(tool == "racecheck", f"{tool}'s staged control")))
    saved = tmp_path / "discover.json"
    code = main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "-j", "2",
                 "--case-budget", "3", "--ops", "CPY,SOFT_MAX,ADD", "--save", str(saved), "--format", "json", *args])
    modes = (build / "modes.log").read_text().splitlines()
    return json.loads(saved.read_text()), modes, code


def root_at(doc: dict, site: str) -> dict:
    return next(r for r in doc["roots"] if r["site"] == site)


def test_sanitized_cases_run_in_launch_mode_and_only_the_cases_with_findings_run_the_numeric_test(tmp_path,
                                                                                                    monkeypatch):
    doc, modes, _ = discover(tmp_path, monkeypatch)
    assert doc["program"]["mode"] == LAUNCH
    sanitized = [m for m in modes if " racecheck " in m]
    assert sanitized and all(m.startswith("launch ") for m in sanitized)
    numeric = [m for m in modes if m.startswith("test none ")]
    # One test-mode process per op with findings (CPY's q4_0 pair, SOFT_MAX's two); ADD is clean: none.
    assert sorted(numeric) == ["test none CPY", "test none SOFT_MAX"]
    assert len(doc["numeric_runs"]) == 2 and all(r["why"] is None for r in doc["numeric_runs"])
    cpy = root_at(doc, "src/ggml-cuda/cpy.cu:57")
    # Launch mode printed OK for ne=[4096,…]; its FAIL comes from the numeric run, not from the sanitized one.
    assert (cpy["cases"], cpy["numeric_failed"], cpy["numeric_unchecked"]) == (2, 1, 0)
    by_params = {c["params"]: c for c in doc["cases"] if c["op"] == "CPY" and "q4_0" in c["params"]}
    big = by_params["type_src=f32,type_dst=q4_0,ne=[4096,4,1,1]"]
    assert (big["mode"], big["status"], big["numeric"]) == (LAUNCH, "OK", "FAIL")
    quiet = [c for c in doc["cases"] if c["state"] in ("clean", "spared")]
    assert quiet and all(c["numeric"] is None for c in quiet)       # a case without findings needs no numeric run


def test_a_numeric_run_that_dies_leaves_its_cases_not_tested_never_passing(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, staged=lambda build: (build / "numeric-aborts").write_text(""))
    soft_max = root_at(doc, "src/ggml-cuda/common.cuh:512")
    assert (soft_max["cases"], soft_max["numeric_failed"], soft_max["numeric_unchecked"]) == (2, 0, 2)
    run = next(r for r in doc["numeric_runs"] if r["op"] == "SOFT_MAX")
    assert run["statuses"] == 0 and "printed no status" in run["why"]
    assert root_at(doc, "src/ggml-cuda/cpy.cu:57")["numeric_unchecked"] == 0


def test_program_plain_keeps_test_mode_and_its_own_comparison(tmp_path, monkeypatch):
    doc, modes, _ = discover(tmp_path, monkeypatch, "--program", "plain")
    assert doc["program"] == {"path": doc["program"]["path"], "mode": TEST, "why": "--program plain", "probe": None}
    assert all(m.startswith("test racecheck ") for m in modes)
    assert doc["numeric_runs"] == []
    cpy = root_at(doc, "src/ggml-cuda/cpy.cu:57")
    assert (cpy["numeric_failed"], cpy["numeric_unchecked"]) == (1, 0)


@pytest.mark.parametrize("why_not, env, expected", [
    (None, "0", "KVDIAG_PROBE_PROGRAM=0"),
    ("the patch does not apply", None, "could not be made: the patch does not apply"),
])
def test_the_users_program_in_test_mode_where_the_probe_cannot_run_saying_why(monkeypatch, tmp_path, why_not, env,
                                                                            expected):
    if env is not None:
        monkeypatch.setenv("KVDIAG_PROBE_PROGRAM", env)
    else:
        monkeypatch.delenv("KVDIAG_PROBE_PROGRAM", raising=False)
    made = ProbeProgram("test-backend-ops-launch", path=None if why_not else tmp_path / "probe", why_not=why_not)
    target = type("T", (), {"probe_program": staticmethod(lambda: made)})()
    chosen = choose_program(target, tmp_path / "test-backend-ops")
    assert (chosen.mode, chosen.path.name) == (TEST, "test-backend-ops")
    assert expected in chosen.why


def test_merged_shards_keep_their_numeric_runs_and_say_when_they_ran_different_modes():
    from kvdiag.store.discoveries import merged_program

    launch = {"path": "/p", "mode": LAUNCH, "why": "made", "probe": None}
    test = {"path": "/b", "mode": TEST, "why": "the launch probe's program could not be made: no ninja", "probe": None}
    assert merged_program([{"shard": "1/2", "program": launch}, {"shard": "2/2", "program": launch}]) == launch
    mixed = merged_program([{"shard": "2/2", "program": test}, {"shard": "1/2", "program": launch}])
    assert mixed["mode"] == "mixed"
    assert mixed["why"] == "the shards ran different modes (shard 1/2: launch, shard 2/2: test)"


def test_merged_shards_say_when_they_ran_different_backtraces():
    from kvdiag.report.discover_formats import backtrace_line
    from kvdiag.store.discoveries import merged_backtrace

    assert merged_backtrace([{"backtrace": "auto"}, {"backtrace": "auto"}]) == "auto"
    assert merged_backtrace([{}, {"backtrace": "device"}]) == "device"      # a record before --backtrace
    assert merged_backtrace([{"backtrace": "auto"}, {"backtrace": "device"}]) == "mixed"
    doc = {"tools": ["racecheck", "synccheck"], "cases": [], "backtrace": "mixed"}
    assert "different --backtrace values" in backtrace_line(from_document(doc))
    doc["backtrace"] = "auto"
    assert backtrace_line(from_document(doc)).startswith("backtrace: synccheck without device frames")
    doc["backtrace"] = "device"
    assert backtrace_line(from_document(doc)) is None


def test_a_merge_concatenates_the_shards_numeric_runs(tmp_path, monkeypatch):
    """Two shards of the staged suite in launch mode: each ran the numeric test of its own hits."""
    isolate(monkeypatch, tmp_path)
    kv = Scenarios(tmp_path / "kv")
    build = staged_build(kv)
    target = make_target(build, log_dir=tmp_path / "target-logs", sanitizer=kv.sanitizer())
    made = ProbeProgram("test-backend-ops-launch", path=build / "bin" / "test-backend-ops", reused=True)
    monkeypatch.setattr(discover_session, "prepare_target",
                        lambda *a, **k: dataclasses.replace(target, probe_program=lambda: made))
    monkeypatch.setattr(discover_session, "controls_gate_provider",
                        lambda *a, **k: (lambda tool: Gate(tool == "racecheck", "staged")))
    parts = []
    for index in (1, 2):
        part = tmp_path / f"part{index}.json"
        main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "-j", "2", "--case-budget", "3",
              "--ops", "CPY,SOFT_MAX,ADD", "--shard", f"{index}/2", "--save", str(part), "--format", "json"])
        parts.append(json.loads(part.read_text()))
    merged = tmp_path / "merged.json"
    main(["--registry", str(kv.registry_dir), "merge", *(str(tmp_path / f"part{i}.json") for i in (1, 2)),
          "-o", str(merged), "--format", "json"])
    doc = json.loads(merged.read_text())
    assert doc["program"]["mode"] == LAUNCH
    assert len(doc["numeric_runs"]) == sum(len(p["numeric_runs"]) for p in parts) >= 2
    cpy = next(r for r in doc["roots"] if r["site"] == "src/ggml-cuda/cpy.cu:57")
    assert (cpy["numeric_failed"], cpy["numeric_unchecked"]) == (1, 0)
    # racecheck's routing added up over the shards: CPY to f16 and ADD spared (4), CPY to q4_0 and SOFT_MAX not
    assert doc["routing"]["source"] == "route" and (doc["routing"]["spared"], doc["routing"]["sanitized"]) == (4, 4)
    assert sum(p["routing"]["spared"] for p in parts) == 4


def test_merged_routing_says_when_the_shards_routed_differently():
    from kvdiag.store.discoveries import merged_routing

    routed = {"routed": ["racecheck"], "source": "synccheck", "why": "routed", "sanitized": 3, "spared": 5}
    plain = {"routed": [], "source": None, "why": "not routed: the build's own program …"}
    assert merged_routing([{"shard": "1/2", "routing": routed}, {"shard": "2/2", "routing": routed}]) == {
        **routed, "sanitized": 6, "spared": 10}
    mixed = merged_routing([{"shard": "2/2", "routing": plain}, {"shard": "1/2", "routing": routed}])
    assert (mixed["source"], mixed["sanitized"], mixed["spared"]) == ("mixed", 3, 5)
    assert mixed["why"] == ("the shards routed differently (shard 1/2: routed; shard 2/2: not routed: the build's "
                            "own program …)")


def test_racecheck_is_spared_the_cases_whose_launches_hold_no_shared_memory_listed_by_synccheck(tmp_path,
                                                                                                 monkeypatch):
    doc, modes, _ = discover(tmp_path, monkeypatch, "--tool", "racecheck,synccheck", "--ops", "CPY,ADD,MUL_MAT")
    assert doc["routing"]["routed"] == ["racecheck"] and doc["routing"]["source"] == "synccheck"
    assert not any(p["tool"] == "route" for p in doc["processes"])      # synccheck listed: no route pass
    racecheck = {c["params"]: c for c in doc["cases"] if c["tool"] == "racecheck"}
    synccheck = {c["params"]: c for c in doc["cases"] if c["tool"] == "synccheck"}
    assert len(racecheck) == len(synccheck) == 10                      # every case under both tools
    spared = sorted(p for p, c in racecheck.items() if c["state"] == "spared")
    # no shared memory: CPY to f16, ADD, MUL_MAT n=1; MUL_MAT n=9 called cuBLAS (unknown): sanitized
    assert spared == ["type=f32,ne=[10,5,4,3],nr=[1,1,1,1]", "type=f32,ne=[16,10,1,1],nr=[2,1,1,1]",
                      "type_a=f16,m=16,n=1,k=256", "type_a=f32,m=32,n=1,k=256",
                      "type_src=f32,type_dst=f16,ne=[256,4,4,1]",
                      "type_src=f32,type_dst=f16,ne=[32,4,1,1]"]
    assert "its synccheck process listed 1 launch(es), none holding shared memory" in racecheck[spared[0]]["why"]
    assert synccheck[spared[0]]["launches"] == 1 and synccheck[spared[0]]["shared_memory"] == 0
    assert synccheck["type_a=f16,m=16,n=9,k=256"]["shared_memory"] is None
    # the abort (n=7) printed no status under synccheck, so racecheck ran it too and it aborted there as well
    assert racecheck["type_a=f16,m=16,n=7,k=250"]["state"] == "aborted"
    assert racecheck["type_src=f32,type_dst=q4_0,ne=[32,4,1,1]"]["state"] == "findings"
    assert doc["routing"]["spared"] == 6 and doc["routing"]["sanitized"] == 4
    assert doc["totals"]["by_tool"]["racecheck"]["spared"] == 6 and doc["totals"]["cut"] == 0


def test_no_route_sanitizes_every_case_and_says_so(tmp_path, monkeypatch):
    doc, modes, _ = discover(tmp_path, monkeypatch, "--no-route")
    assert doc["routing"] == {"routed": [], "source": None, "why": "--no-route: every case sanitized under every tool"}
    assert not any(c["state"] == "spared" for c in doc["cases"])
    assert not any(p["tool"] == "route" for p in doc["processes"])


def test_racecheck_alone_lists_the_launches_in_a_route_pass_without_a_sanitizer(tmp_path, monkeypatch):
    doc, modes, _ = discover(tmp_path, monkeypatch)
    assert doc["routing"]["source"] == "route"
    route = sorted(p["op"] for p in doc["processes"] if p["tool"] == "route")
    assert route == ["ADD", "CPY", "SOFT_MAX"]
    assert {p["tool"] for p in doc["processes"]} == {"route", "racecheck"}
    assert not any(c["tool"] == "route" for c in doc["cases"])           # the route pass judges nothing
    sanitized = sorted(m for m in modes if " racecheck " in m)
    assert sanitized == ["launch racecheck CPY", "launch racecheck SOFT_MAX"]   # ADD held no shared memory


def test_backtrace_no_asks_the_sanitizer_for_records_without_device_frames(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--backtrace", "no", "--ops", "SOFT_MAX")
    assert doc["backtrace"] == "no"
    logs = Path(doc["run_dir"]) / "logs"
    argv = json.loads((logs / "racecheck-00002.cmd.json").read_text())["argv"]
    assert argv[argv.index("--show-backtrace") + 1] == "no"

def test_by_default_synccheck_goes_without_device_frames_and_racecheck_keeps_them(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--tool", "racecheck,synccheck", "--ops", "SOFT_MAX")
    assert doc["backtrace"] == "auto"
    shown = {}
    for cmd in (Path(doc["run_dir"]) / "logs").glob("*.cmd.json"):
        argv = json.loads(cmd.read_text())["argv"]
        if "--tool" in argv:
            shown.setdefault(argv[argv.index("--tool") + 1], set()).add(argv[argv.index("--show-backtrace") + 1])
    assert shown == {"racecheck": {"device"}, "synccheck": {"no"}}
    soft_max = [c for c in doc["cases"] if c["tool"] == "synccheck"]
    assert soft_max and all(c["state"] != "cut" for c in soft_max)


def test_backtrace_device_gives_every_tool_its_frames(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--backtrace", "device", "--tool", "synccheck", "--ops", "SOFT_MAX")
    argv = json.loads((Path(doc["run_dir"]) / "logs" / "synccheck-00001.cmd.json").read_text())["argv"]
    assert argv[argv.index("--show-backtrace") + 1] == "device" and doc["backtrace"] == "device"


def test_a_program_whose_launches_the_probe_cannot_see_spares_nothing(tmp_path, monkeypatch):
    """No launch line at all is not "launched nothing": every case is sanitized under racecheck."""
    doc, modes, _ = discover(tmp_path, monkeypatch, "--tool", "racecheck,synccheck", "--ops", "CPY,ADD",
                             staged=lambda build: (build / "blind-launches").write_text(""))
    racecheck = [c for c in doc["cases"] if c["tool"] == "racecheck"]
    assert len(racecheck) == 6 and not any(c["state"] == "spared" for c in racecheck)
    assert (doc["routing"]["spared"], doc["routing"]["sanitized"]) == (0, 6)
    assert {m for m in modes if " racecheck " in m} == {"launch racecheck ADD", "launch racecheck CPY"}


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_a_root_of_a_tool_without_frames_marks_its_kernels_column(tmp_path, monkeypatch, fmt):
    from kvdiag.report.discover_formats import render

    doc, _, _ = discover(tmp_path, monkeypatch, "--tool", "racecheck,synccheck", "--ops", "SOFT_MAX")
    shown = render(from_document(doc), fmt)
    assert "synccheck without device frames" in shown
    racecheck_rows = [line for line in shown.splitlines() if "race-hazard" in line and "common.cuh" in line]
    assert racecheck_rows and all("(no frames)" not in line for line in racecheck_rows)   # racecheck kept its frames
    doc["backtrace"] = "no"
    assert "(no frames)" in render(from_document(doc), fmt)


def _barrier(build: Path) -> None:
    (build / "divergent-barrier").write_text("")


def test_a_frameless_root_names_its_launching_kernel_from_its_smallest_case_run_again_with_frames(tmp_path,
                                                                                                   monkeypatch):
    doc, _, code = discover(tmp_path, monkeypatch, "--tool", "synccheck", "--ops", "SOFT_MAX", staged=_barrier)
    assert code == 1 and doc["backtrace"] == "auto"
    root = root_at(doc, "src/ggml-cuda/common.cuh:530")
    assert root["function"] == "block_reduce" and root["cases"] == 2
    assert root["kernels"] == {"block_reduce": 2}                 # without frames: the inlined function itself
    framed = root["frames"]
    assert framed["kernels"] == {"soft_max_f32": 1} and framed["why"] is None
    assert framed["params"] == "type=f32,ne=[16,2,1,1],mask=0"     # the smallest of its cases
    assert list(framed["instantiations"]) == ["soft_max_f32<(bool)1, (int)0, (int)0, float>"]
    logs = Path(doc["run_dir"]) / "logs"
    argv = json.loads((logs / "frames-00001.cmd.json").read_text())["argv"]
    assert argv[argv.index("--show-backtrace") + 1] == "device" and argv[argv.index("--tool") + 1] == "synccheck"
    assert [f.name for f in logs.glob("frames-*.cmd.json")] == ["frames-00001.cmd.json"]    # one process a root


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_the_reports_name_the_framed_kernels_and_a_read_back_document_keeps_them(tmp_path, monkeypatch, fmt):
    from kvdiag.report.discover_formats import render

    doc, _, _ = discover(tmp_path, monkeypatch, "--tool", "synccheck", "--ops", "SOFT_MAX", staged=_barrier)
    shown = render(from_document(doc), fmt)
    assert "soft_max_f32 (frames of its smallest case)" in shown and "(no frames)" not in shown
    assert "1 of 1 such root(s) had their smallest case run again with device frames" in shown
    doc["frames"] = []                                   # a record from before the follow-up: marked as before
    assert "block_reduce (no frames)" in render(from_document(doc), fmt)


def test_with_device_frames_everywhere_no_case_runs_again(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--backtrace", "device", "--tool", "synccheck", "--ops", "SOFT_MAX",
                         staged=_barrier)
    assert doc["frames"] == [] and root_at(doc, "src/ggml-cuda/common.cuh:530")["kernels"] == {"soft_max_f32": 2}
    assert not list((Path(doc["run_dir"]) / "logs").glob("frames-*"))


def test_a_framed_run_that_finds_nothing_at_the_site_says_so_and_the_root_keeps_its_kernels():
    from kvdiag.engine.discover.cases import CLEAN, CaseRecord
    from kvdiag.engine.discover.reframe import apply_frames, frames_row
    from kvdiag.engine.discover.roots import Root, RootKey

    root = Root(RootKey("synccheck", "barrier-divergence", "common.cuh:530", "block_reduce"), kernels={"block_reduce": 3},
                smallest={"op": "SOFT_MAX", "params": "n=1", "elements": 1})
    row = frames_row(root, [CaseRecord(tool="synccheck", op="SOFT_MAX", params="n=1", state=CLEAN)], wall_s=1.25)
    assert row["kernels"] == {} and row["why"] == "the framed run reported nothing at this root's site (clean)"
    apply_frames([root], [row])
    assert root.frames == row and root.kernels == {"block_reduce": 3}


def test_a_racecheck_root_names_the_kernels_holding_shared_memory_among_its_smallest_cases_launches(tmp_path,
                                                                                                     monkeypatch):
    """Racecheck's race records carry no device frames: the CPY race names only its reporting function."""
    doc, modes, _ = discover(tmp_path, monkeypatch, "--ops", "CPY")
    root = root_at(doc, "src/ggml-cuda/cpy.cu:57")
    assert root["kernels"] == {"cpy_f32_q": 2}
    row = root["frames"]
    assert row["by"] == "launches" and row["why"] is None and row["params"] == "type_src=f32,type_dst=q4_0,ne=[32,4,1,1]"
    assert row["kernels"] == {"cpy_f32_q": 1} and list(row["instantiations"]) == ["cpy_f32_q<&quantize_block_q4_0, 32>"]
    assert modes.count("launch none CPY") == 2                           # the route pass, and the root's case alone
    argv = json.loads((Path(doc["run_dir"]) / "logs" / "launches-00001.cmd.json").read_text())["argv"]
    assert "compute-sanitizer" not in " ".join(argv) and argv[argv.index("-p") + 1] == f"^({re.escape(row['params'])})$"


def test_a_racecheck_root_whose_smallest_case_lists_no_shared_memory_says_so():
    from kvdiag.engine.discover.cases import CLEAN, CaseRecord
    from kvdiag.engine.discover.reframe import launches_row
    from kvdiag.engine.discover.roots import Root, RootKey

    root = Root(RootKey("racecheck", "race-hazard", "cuda_fp16.h:5122", "__half2::__half2"),
                kernels={"__half2::__half2": 1}, smallest={"op": "FLASH_ATTN_EXT", "params": "n=1", "elements": 1})
    assert launches_row(root, [])["why"] == "its launches named no kernel holding shared memory (it gave no record)"
    record = CaseRecord(tool="route", op="FLASH_ATTN_EXT", params="n=1", state=CLEAN)
    assert launches_row(root, [record])["why"] == "its launches named no kernel holding shared memory (clean)"


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_the_reports_say_how_a_racecheck_roots_kernels_were_named(tmp_path, monkeypatch, fmt):
    from kvdiag.report.discover_formats import render

    doc, _, _ = discover(tmp_path, monkeypatch, "--ops", "CPY")
    shown = render(from_document(doc), fmt)
    assert "cpy_f32_q (holding shared memory in its smallest case)" in shown
    assert "1 of 1 racecheck root(s) name the kernels holding shared memory" in shown


def test_ctrl_c_during_the_kernels_follow_up_saves_the_discovery_as_interrupted(tmp_path, monkeypatch):
    """Every case was judged; the root's follow-up process is stopped, its row says so, nothing is lost."""
    import _thread

    from kvdiag.engine.discover import reframe

    real = reframe.run_unit

    def interrupted_then_run(unit, runner, **kwargs):
        _thread.interrupt_main()                 # Ctrl-C reaches the main thread while this process starts
        time.sleep(0.5)
        return real(unit, runner, **kwargs)

    monkeypatch.setattr(reframe, "run_unit", interrupted_then_run)
    doc, _, code = discover(tmp_path, monkeypatch, "--tool", "synccheck", "--ops", "SOFT_MAX", staged=_barrier)
    assert code == 130 and doc["interrupted"] is True
    assert {c["state"] for c in doc["cases"]} == {"findings"}          # the suite itself had finished
    [row] = doc["frames"]
    assert row["kernels"] == {} and "interrupted" in row["why"]
    assert root_at(doc, "src/ggml-cuda/common.cuh:530")["frames"] == row


def test_ctrl_c_during_the_numeric_test_saves_the_discovery_as_interrupted(tmp_path, monkeypatch):
    """The cases were judged; the numeric run is stopped and its cases keep no status (never passing)."""
    import _thread

    from kvdiag.engine.discover import numeric

    real = numeric.run_command

    def interrupted_then_run(*args, **kwargs):
        _thread.interrupt_main()
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(numeric, "run_command", interrupted_then_run)
    doc, _, code = discover(tmp_path, monkeypatch, "--ops", "CPY")
    assert code == 130 and doc["interrupted"] is True
    found = [c for c in doc["cases"] if c["state"] == "findings"]
    assert len(found) == 2 and all(c["numeric"] is None for c in found)
    [row] = doc["numeric_runs"]
    assert row["statuses"] == 0 and "interrupted" in row["why"].lower()
    assert doc["frames"] == []                          # the follow-up does not start after a Ctrl-C


def test_racecheck_workers_reach_racecheck_processes_only_and_the_record(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--racecheck-workers", "2", "--tool", "racecheck,synccheck",
                         "--ops", "SOFT_MAX")
    assert doc["racecheck_workers"] == 2 and from_document(doc).racecheck_workers == 2
    workers = {}
    for cmd in (Path(doc["run_dir"]) / "logs").glob("*.cmd.json"):
        argv = json.loads(cmd.read_text())["argv"]
        if "--tool" in argv:
            tool = argv[argv.index("--tool") + 1]
            given = argv[argv.index("--racecheck-num-workers") + 1] if "--racecheck-num-workers" in argv else None
            workers.setdefault(tool, set()).add(given)
    assert workers == {"racecheck": {"2"}, "synccheck": {None}}
    assert all(c["state"] != "cut" for c in doc["cases"])


def test_without_racecheck_workers_the_tool_picks_its_own_and_older_records_read_as_unset(tmp_path, monkeypatch):
    doc, _, _ = discover(tmp_path, monkeypatch, "--ops", "SOFT_MAX")
    assert doc["racecheck_workers"] is None
    for cmd in (Path(doc["run_dir"]) / "logs").glob("*.cmd.json"):
        assert "--racecheck-num-workers" not in json.loads(cmd.read_text())["argv"]
    older = {k: v for k, v in doc.items() if k != "racecheck_workers"}
    assert from_document(older).racecheck_workers is None
    assert from_document({**doc, "racecheck_workers": True}).racecheck_workers is None     # not a count


def test_merged_shards_keep_racecheck_workers_only_when_they_agree():
    from kvdiag.store.discoveries import merged_racecheck_workers

    assert merged_racecheck_workers([{"racecheck_workers": 1}, {"racecheck_workers": 1}]) == 1
    assert merged_racecheck_workers([{"racecheck_workers": 1}, {}]) is None
    assert merged_racecheck_workers([{"racecheck_workers": [1]}, {"racecheck_workers": [1]}]) is None   # damaged



def test_a_discovery_under_an_mps_daemon_records_its_pipe_and_every_report_says_so(tmp_path, monkeypatch):
    """CUDA connects the processes to the daemon the variable names; nothing in their output says so, so
    the discovery records it (kvdiag.proc.mps), and a merge keeps it only where every shard agrees."""
    import socket
    import tempfile

    from kvdiag.report.discover_formats import render_html, render_markdown, render_text
    from kvdiag.store.discoveries import merged_mps

    folder = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))       # short: a socket's path is limited
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(str(folder / "control"))
    server.listen(8)
    try:
        monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(folder))
        doc, _, _ = discover(tmp_path, monkeypatch, "--ops", "SOFT_MAX")
    finally:
        server.close()
        (folder / "control").unlink()
        folder.rmdir()
    assert doc["mps"] == {"pipe": str(folder), "named_by": "CUDA_MPS_PIPE_DIRECTORY"}
    result = from_document(doc)
    said = f"MPS: the processes were clients of the MPS daemon at {folder} (named by CUDA_MPS_PIPE_DIRECTORY)"
    assert all(said in render(result) for render in (render_text, render_markdown, render_html))
    assert merged_mps([doc, doc]) == doc["mps"]
    assert merged_mps([doc, {**doc, "mps": None}]) is None
    assert merged_mps([doc, {**doc, "mps": {"pipe": "/elsewhere", "named_by": "default"}}]) is None


def test_without_a_listening_daemon_no_mps_is_recorded_and_older_records_read_as_none(tmp_path, monkeypatch):
    from kvdiag.report.discover_formats import render_text

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))
    doc, _, _ = discover(tmp_path, monkeypatch, "--ops", "SOFT_MAX")
    assert doc["mps"] is None and "MPS: the processes were clients" not in render_text(from_document(doc))
    older = {k: v for k, v in doc.items() if k != "mps"}
    assert from_document(older).mps is None
    assert from_document({**doc, "mps": {"pipe": 7}}).mps is None                 # damaged
