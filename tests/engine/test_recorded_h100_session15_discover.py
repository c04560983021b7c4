"""Device session 15 (one H100, 2026-12-06): `kvdiag discover` on ggml v0.9.7 and d99724f2, re-judged.

tests/fixtures/device/h100-session15/discover/ holds what the device printed (its README says what
each file is). Each recorded process log is judged again here by the engine's own
``judge_process`` exactly as the run judged it, and the saved discoveries are read back into
roots: the three races that upstream fixed months later come out of the old tree's logs, none of
the new tree's, and the process that overran its budget is split as the run split it.
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
from kvdiag.engine.discover.result import build_roots, from_document
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session15" / "discover"
LOGS = FIXTURE / "logs"


def read_gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        return fh.read()


def document(name: str) -> dict:
    return json.loads(read_gz(FIXTURE / name))


def unique_cases(doc: dict) -> list[dict]:
    """The recorded cases, each once: the run's salvage after its deadline handed finished units in
    again (fixed since); the duplicates are identical records, which a test below checks."""
    seen: dict[tuple, dict] = {}
    for case in doc["cases"]:
        seen.setdefault((case["tool"], case["op"], case["params"]), case)
    return list(seen.values())


def unit_of(process: str) -> tuple[Unit, dict]:
    """The unit a recorded process ran, from its command line: its tool, its -o and its -p's cases."""
    record = json.loads(read_gz(LOGS / f"{process}.cmd.json.gz"))
    argv = record["argv"]
    pattern = argv[argv.index("-p") + 1]
    body = pattern[2:-2] if pattern.startswith("^(") else pattern[1:-1]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    return Unit(argv[argv.index("--tool") + 1], argv[argv.index("-o") + 1], cases), record["result"]


def rejudge(process: str):
    unit, result = unit_of(process)
    text = strip_ansi(read_gz(LOGS / f"{process}.stdout.log.gz"))
    errors = read_gz(LOGS / f"{process}.stderr.log.gz") if (LOGS / f"{process}.stderr.log.gz").is_file() else ""
    return unit, judge_process(unit, split_cases(text, unit.tool), text, name=process, log=process,
                               wall_s=result["duration_s"], timed_out=result["timed_out"],
                               ended=result["description"], budget_s=120.0, errors=strip_ansi(errors))


@pytest.fixture(scope="module")
def old() -> dict:
    return document("discover-old.json.gz")


def recorded_states(doc: dict, process: str) -> dict[str, str]:
    return {c["params"]: c["state"] for c in unique_cases(doc) if (c["log"] or "").endswith(f"/{process}.stdout.log")}


@pytest.mark.parametrize("process", ["racecheck-00196", "racecheck-00132", "racecheck-00133", "racecheck-00180"])
def test_a_finished_batch_is_judged_again_case_by_case_as_the_device_judged_it(old, process):
    unit, outcome = rejudge(process)
    assert not outcome.again and len(outcome.records) == len(unit.cases)
    assert {r.params: r.state for r in outcome.records} == recorded_states(old, process)


def test_the_soft_max_batch_gives_the_block_reduce_race_and_its_numeric_failures(old):
    _, outcome = rejudge("racecheck-00196")
    roots = build_roots(outcome.records, old["relative"], old["source_lines"])
    top = roots[0].to_dict()
    assert (top["site"], top["function"], top["source_line"]) == (
        "src/ggml-cuda/common.cuh:606", "block_reduce", "val = shared_vals[lane_id];")
    assert top["cases"] == 8 and top["numeric_failed"] == 8        # every racing SOFT_MAX case also FAILed


def test_the_cont_batch_gives_both_sides_of_the_transpose_tile_race(old):
    _, outcome = rejudge("racecheck-00132")
    roots = {r.key.site: r.to_dict() for r in build_roots(outcome.records, old["relative"], old["source_lines"])}
    assert {"src/ggml-cuda/cpy.cu:74", "src/ggml-cuda/cpy.cu:85"} <= set(roots)
    assert roots["src/ggml-cuda/cpy.cu:85"]["function"] == "cpy_scalar_transpose"
    assert "cpy.cu:74" in " ".join(roots["src/ggml-cuda/cpy.cu:85"]["peers"])


def test_the_ssm_scan_race_comes_out_of_the_benchmarks_discovery():
    bench = document("bench-discover.json.gz")
    sites = {r.key.site: r for r in from_document(bench).defects}
    assert {"src/ggml-cuda/ssm-scan.cu:78", "src/ggml-cuda/ssm-scan.cu:79"} <= set(sites)
    assert sites["src/ggml-cuda/ssm-scan.cu:79"].key.function == "ssm_scan_f32"


def test_a_batch_over_its_budget_keeps_its_finished_case_and_splits_the_rest():
    unit, outcome = rejudge("racecheck-00223")
    assert len(unit.cases) == 32 and [r.state for r in outcome.records] == ["clean"]
    assert [len(u.cases) for u in outcome.again] == [1, 15, 15]
    assert outcome.again[0].cases == (unit.cases[1],)             # the one running when the budget ran out
    assert "over its budget" in outcome.row["why"]


def test_a_case_alone_over_its_budget_is_cut_saying_so():
    unit, outcome = rejudge("racecheck-00242")
    assert unit.cases == ("type=f32,ne=[524299,1,2,1],k=1023,ties=0",)
    assert [(r.state, r.why.split(":")[0]) for r in outcome.records] == [("cut", "over its budget (120 s a case)")]


def test_the_old_tree_has_three_roots_and_nine_warning_roots(old):
    result = from_document({**old, "cases": unique_cases(old)})
    assert [(r.key.site, r.key.function, r.cases) for r in result.defects] == [
        ("src/ggml-cuda/common.cuh:606", "block_reduce", 74),
        ("src/ggml-cuda/cpy.cu:85", "cpy_scalar_transpose", 3),
        ("src/ggml-cuda/cpy.cu:74", "cpy_scalar_transpose", 1)]
    assert [r.numeric_failed for r in result.defects] == [74, 3, 1]     # each racing case FAILed the numeric test too
    assert len(result.warnings) == 9
    assert {r.key.function for r in result.warnings} >= {"mm_ids_helper", "quantize_q8_1_to_shared", "mul_mat_f"}


def test_the_recorded_duplicates_are_the_same_records_twice(old):
    """What the salvage bug did on the device: 8991 case records appended a second time, unchanged."""
    groups = collections.defaultdict(list)
    for case in old["cases"]:
        groups[(case["tool"], case["op"], case["params"])].append(case)
    twice = [g for g in groups.values() if len(g) > 1]
    assert len(twice) == 8991 and len(groups) == 9248
    assert all(all(c == g[0] for c in g) for g in twice)


def test_the_run_was_stopped_at_its_deadline_before_synccheck_started(old):
    """The deadline (600 s) came first: racecheck's 10486 cases were not all run, synccheck's not at all.
    The whole suite under both tools did not fit 10 minutes on the H100 (docs/performance.md)."""
    cases = unique_cases(old)
    assert old["interrupted"] is True and old["space"]["cases"] == 10486
    assert {c["tool"] for c in cases} == {"racecheck"}
    assert old["workers"] == 9


def test_the_new_tree_shows_none_of_the_roots_in_the_same_ops():
    new = document("discover-new.json.gz")
    cases = unique_cases(new)
    assert sorted({c["op"] for c in cases}) == ["CONT", "SOFT_MAX"]
    assert len(cases) == 580 and {c["state"] for c in cases} == {"clean"}
    assert from_document(new).roots == []


def test_the_benchmark_recorded_the_raw_way_in_the_same_run():
    bench = json.loads((FIXTURE / "bench-racecheck.json").read_text())
    assert bench["raw"]["cut"] == ["ARGSORT"] and bench["discover"]["totals"]["cut"] == 0
    assert set(bench["raw"]["ops_with_findings"]) == set(bench["discover"]["ops_with_findings"])
    assert bench["ratio_raw_over_discover"] == 0.86


def test_no_machine_path_is_left_in_the_fixture():
    for path in FIXTURE.rglob("*"):
        if path.is_file():
            text = read_gz(path) if path.suffix == ".gz" else path.read_text()
            assert "/tmp/kv" not in text, path.name


# ------------------------------------------------------------------ the drafts discover wrote, judged again

def _draft_attempt(runs: Path, entry_id: str, run_id: str, tree: str):
    """A draft's recorded run on the device, judged again with the draft as discover wrote it."""
    from test_recorded_h100_session15 import NEW, OLD, new_tree_symbols, recorded_result, run_json

    from kvdiag.controls.gate import Gate
    from kvdiag.engine.verdict.judge import judge_attempt
    from kvdiag.engine.evidence.launch_proof import LaunchContext
    from kvdiag.engine.evidence.observe import observe
    from kvdiag.registry.loader import load_registry

    entry = load_registry(FIXTURE / "drafts").get(entry_id)
    logs = runs / run_id / "logs"
    obs = observe(entry.default_step, [recorded_result(logs)], [logs / "fast-1.sanitizer.log"])
    recorded = run_json(runs, run_id)["outcome"]["attempts"][0]["evidence"]
    symbols = new_tree_symbols(recorded.get("launched") or [])
    launch = LaunchContext(symbols=lambda: symbols, commit=OLD if tree == "old" else NEW)
    return judge_attempt(entry, obs, Gate(True, "racecheck control passed"), 1, 1.0, launch=launch)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    import tarfile

    root = tmp_path_factory.mktemp("h100-session15-drafts")
    with tarfile.open(FIXTURE.parent / "store.tar.gz") as archive:
        archive.extractall(root, filter="data")
    return root / "runs"


def test_the_block_reduce_draft_confirms_its_recorded_log_on_the_tree_it_was_found_on(stores):
    attempt = _draft_attempt(stores, "D14", "20261206-114455.313360-0002-D14", "old")
    assert attempt.verdict.value == "confirmed", attempt.reason
    assert any("common.cuh:606" in line for line in attempt.evidence.quoted)


def test_the_block_reduce_draft_is_not_reproduced_past_the_fix_not_not_applicable(stores):
    """On the device this run said not-applicable ("this build contains no kernel the entry is about
    (kernels matching /^block_reduce$/)"): the launch-proof gate took an inlined device function for a
    kernel (issue #41). The same logs, judged again, are not-reproduced: the case ran clean."""
    device = json.loads((FIXTURE.parent / "verdict-drafts-D14-new.json").read_text())
    assert device["verdict"] == "not-applicable" and "^block_reduce$" in device["reason"]
    attempt = _draft_attempt(stores, "D14", "20261206-114458.098156-0002-D14", "new")
    assert attempt.verdict.value == "not-reproduced", attempt.reason


def test_kvdiag_report_writes_the_upstream_report_of_a_drafts_run(stores, tmp_path, monkeypatch, capsys):
    import shutil

    from kvdiag.cli import main

    home = tmp_path / "home"
    shutil.copytree(stores / "20261206-114455.313360-0002-D14", home / "runs" / "20261206-114455.313360-0002-D14")
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    assert main(["--registry", str(FIXTURE / "drafts"), "report", "D14"]) == 0
    report = capsys.readouterr().out
    assert "block_reduce" in report and "common.cuh:606" in report and "confirmed" in report
