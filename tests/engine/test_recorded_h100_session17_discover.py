"""Device session 17 on an H100 (tests/fixtures/device/h100-session17): `kvdiag discover` with the
build's own test-backend-ops in test mode against the launch probe's GPU-only mode, same tree, same
ops, same tool, one after the other.

ggml d99724f2 built there; racecheck over IM2COL_3D, CONV_2D and MUL_MAT (4191 cases), each arm
stopped at 150 s. The saved discoveries are read back; two processes of each arm are judged again
from their raw logs with ``judge_process``, as the run judged them.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path

import pytest

from kvdiag.engine.discover.batch import Unit, judge_process
from kvdiag.engine.discover.cases import CaseRecord
from kvdiag.engine.discover.result import from_document
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session17"
ARMS = ("plain", "auto")
COMPLETE_OPS = ("CONV_2D", "IM2COL_3D")          # every case judged in both arms (MUL_MAT was cut at the deadline)


def read_gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        return fh.read()


def document(arm: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"ab-{arm}.json.gz"))


def judged(doc: dict) -> dict[tuple[str, str], dict]:
    return {(c["op"], c["params"]): c for c in doc["cases"] if c["state"] != "cut"}


def findings_of(case: dict) -> list[tuple]:
    """Where and what, not how many: racecheck's hazard counts vary from one run to the next."""
    return sorted((f["kind"], f["file"], f["line"], f["function"], f["kernel"], f["peer"]) for f in case["findings"])


def op_seconds(doc: dict) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for row in doc["processes"]:
        out[row["op"]] += row["wall_s"]
    return dict(out)


def test_the_two_arms_ran_the_same_cases_one_in_test_mode_one_in_launch_mode():
    plain, auto = document("plain"), document("auto")
    assert plain["space"] == auto["space"] and plain["space"]["cases"] == 4191
    assert (plain["program"]["mode"], plain["program"]["why"]) == ("test", "--program plain")
    assert auto["program"]["mode"] == "launch" and "program built in 28.0 s" in auto["program"]["why"]
    assert [len(d["processes"]) for d in (plain, auto)] == [133, 133] and plain["workers"] == auto["workers"] == 9


def test_every_case_both_arms_judged_has_the_same_state_and_findings():
    """4095 cases judged by both: the launch mode's sanitizer sees exactly what test mode's sees."""
    plain, auto = judged(document("plain")), judged(document("auto"))
    both = set(plain) & set(auto)
    assert len(both) == 4095 and set(auto) <= set(plain)
    assert all((plain[k]["state"], findings_of(plain[k])) == (auto[k]["state"], findings_of(auto[k])) for k in both)
    assert {c["status"] for c in plain.values()} == {"OK"}        # nothing FAILed the numeric test in test mode


@pytest.mark.parametrize("op, before, after", [("CONV_2D", 281.4, 266.8), ("IM2COL_3D", 193.8, 182.4)])
def test_launch_mode_saves_five_to_six_percent_of_the_sanitized_time_on_ops_both_arms_finished(op, before, after):
    plain, auto = document("plain"), document("auto")
    counts = [sum(1 for c in d["cases"] if c["op"] == op and c["state"] != "cut") for d in (plain, auto)]
    assert counts[0] == counts[1] == plain["space"]["ops"][op]
    assert (round(op_seconds(plain)[op], 1), round(op_seconds(auto)[op], 1)) == (before, after)
    assert 0.05 < 1 - after / before < 0.065


def test_a_discovery_stopped_at_its_deadline_runs_no_numeric_test_and_says_its_roots_were_not_tested():
    """The launch arm compared nothing; its deadline came before the numeric runs, so every case of
    its (warning) roots is "not tested": never counted as passing. The test-mode arm compared each case."""
    auto, plain = from_document(document("auto")), from_document(document("plain"))
    assert document("auto")["numeric_runs"] == [] and document("auto")["interrupted"] is True
    assert auto.warnings and all(r.numeric_unchecked == r.cases and r.numeric_failed == 0 for r in auto.warnings)
    assert plain.warnings and all(r.numeric_unchecked == 0 for r in plain.warnings)
    assert "0 (17 not tested)" in (FIXTURE / "ab-auto.txt").read_text()


def unit_of(arm: str, process: str) -> tuple[Unit, dict, list[str]]:
    record = json.loads(read_gz(FIXTURE / "logs" / arm / f"{process}.cmd.json.gz"))
    argv = record["argv"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    return Unit(argv[argv.index("--tool") + 1], argv[argv.index("-o") + 1], cases), record["result"], argv


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("process", ["racecheck-00001", "racecheck-00117"])
def test_recorded_processes_judge_again_as_the_run_judged_them(arm, process):
    unit, result, argv = unit_of(arm, process)
    program = argv[argv.index("--show-backtrace") + 2:]
    assert program[1] == {"plain": "test", "auto": "launch"}[arm]
    text = strip_ansi(read_gz(FIXTURE / "logs" / arm / f"{process}.stdout.log.gz"))
    outcome = judge_process(unit, split_cases(text, unit.tool), text, name=process, log=process,
                            wall_s=result["duration_s"], timed_out=result["timed_out"], ended=result["description"],
                            budget_s=120.0)
    recorded = {c["params"]: CaseRecord.from_dict(c) for c in document(arm)["cases"]
                if c["log"].endswith(f"/{process}.stdout.log")}
    assert len(outcome.records) == len(unit.cases) == len(recorded) == 32 and not outcome.again
    for record in outcome.records:
        saved = recorded[record.params]
        findings = tuple(map(as_run_named, record.findings))
        assert (record.state, record.status, tuple(map(uncounted, findings))) == (
            saved.state, saved.status, tuple(map(uncounted, saved.findings)))
        # A record with several "and ... access" lines now stands for all their hazards, not the last line's.
        assert all(now.count >= then.count for now, then in zip(findings, saved.findings))
    if process == "racecheck-00117":           # MUL_MAT: the mma.cuh / mmf.cuh racecheck warnings, in both arms
        assert sum(r.state == "findings" for r in outcome.records) == 2
        functions = {f.function for r in outcome.records for f in r.findings}
        assert "__half2::operator=" in functions and "=" not in functions
        counted = sum(f.count for r in outcome.records for f in r.findings)
        assert counted > sum(f.count for c in recorded.values() for f in c.findings)   # several writes per read


def uncounted(finding):
    import dataclasses

    return dataclasses.replace(finding, count=0)


def as_run_named(finding):
    """The finding as the run named it: `__half2::operator =(const __half2&&)` was read as the function
    "=" until the signature reader learnt operator names (after this session)."""
    import dataclasses

    if finding.function != "__half2::operator=":
        return finding
    return dataclasses.replace(finding, function="=", instantiation="=", kernel="=")


def test_the_whole_suite_of_the_new_tree_is_twelve_thousand_cases():
    """What the whole-suite discovery started with before the session's device time ran out."""
    said = (FIXTURE / "discover-whole-suite.err").read_text()
    assert "11942 case(s) of 108 op(s) under racecheck, synccheck: 892 process(es) to start, 9 at a time" in said


def test_the_text_says_where_the_process_time_went():
    """The recorded test-mode arm: MUL_MAT's processes took most of it."""
    from kvdiag.report.discover_formats import render_text, time_line

    result = from_document(document("plain"))
    assert time_line(result) == ("process time: 1140 s over 133 process(es): MUL_MAT under racecheck 665 s, "
                                 "CONV_2D under racecheck 281 s, IM2COL_3D under racecheck 194 s")
    assert time_line(result, most=1).endswith(", the other 2 op/tool pair(s) 475 s")
    assert time_line(result) in render_text(result)


def test_the_benchmark_compares_the_two_recorded_arms_as_this_session_did():
    """benchmarks/bench_discover.py --programs plain,auto makes this A/B in one run; its comparison,
    fed the two recorded discoveries, gives the figures above."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_discover", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_discover.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    compared = bench.compare_arms(document("plain"), document("auto"), names=("plain", "auto"))
    assert (compared["cases_judged_by_both"], compared["agree"]) == (4095, 4095)
    assert compared["ops_both_finished"] == {
        "CONV_2D": {"plain": 281.4, "auto": 266.8, "ratio": 0.948},
        "IM2COL_3D": {"plain": 193.8, "auto": 182.4, "ratio": 0.941}}
