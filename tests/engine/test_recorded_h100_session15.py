"""Device session 15 on an H100 (tests/fixtures/device/h100-session15): D14, D15 and D16's recorded pairs.

Three races that `kvdiag discover` found on ggml v0.9.7 became registry entries. Their candidate entries
ran on v0.9.7 (inside every range) and on d99724f2 (past every fix), with the same command the final
entries' fast steps run. Each run's raw logs are judged again here with the final entry from registry/,
by the engine's own observe and judge: confirmed on the old tree quoting the site, not-reproduced on the
new one. The drafts discover wrote ran on both trees too; their stores are kept beside them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine_helpers import FIXTURES, recorded_command, unpacked_store
from kvdiag.controls.gate import Gate
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.launch_proof import LaunchContext
from kvdiag.engine.evidence.observe import observe
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.parse.sanitizer import parse_sanitizer
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.kernel_symbols import KernelSymbols

SESSION = FIXTURES / "device" / "h100-session15"
OLD, NEW = "d6754f3d0e6d0acd21c12442353c9fd2f94188e7", "d99724f2b141fed9e1a9f402213506c081433465"
CANDIDATE_RUNS = {   # (entry, tree): the candidate's run, in the order the session ran them
    ("D14", "old"): "20261206-114532.742153-0002-D14", ("D14", "new"): "20261206-114535.399434-0002-D14",
    ("D15", "old"): "20261206-114538.082099-0002-D15", ("D15", "new"): "20261206-114540.904563-0002-D15",
    ("D16", "old"): "20261206-114549.862052-0002-D16", ("D16", "new"): "20261206-114608.763692-0002-D16",
}
DRAFT_RUNS = ("20261206-114455.313360-0002-D14", "20261206-114458.098156-0002-D14",
              "20261206-114522.477855-0002-D15", "20261206-114525.003760-0002-D15",
              "20261206-114527.430097-0002-D16", "20261206-114530.244886-0002-D16")
CONTROL = "racecheck control passed on this machine on 2026-12-06 (launcher cupy)"
# What the site of each confirmed run says, and the kernels each not-reproduced run launched.
OLD_SITES = {"D14": {"cpy.cu:74"}, "D15": {"ssm-scan.cu:78", "ssm-scan.cu:79"},
             "D16": {"common.cuh:606", "common.cuh:601"}}
SYMBOLS_IN_NEW = 6201   # cuobjdump's count for d99724f2's libggml-cuda, from the draft D14 run on it


@pytest.fixture(scope="module")
def registry():
    return load_registry(Path(__file__).resolve().parents[2] / "registry")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return unpacked_store(tmp_path_factory, SESSION / "store.tar.gz") / "runs"


def run_json(runs: Path, run_id: str) -> dict:
    return json.loads((runs / run_id / "run.json").read_text())


def recorded_result(logs: Path):
    """The recorded process as the runner left it: its stdout and stderr logs (run on a terminal, so
    no combined log was written; combined is the two together)."""
    combined = logs / "recorded.combined.log"
    combined.write_text((logs / "fast-1.stdout.log").read_text() + (logs / "fast-1.stderr.log").read_text())
    return recorded_command(logs, "fast-1", combined)


def new_tree_symbols(launched: list[str]) -> KernelSymbols:
    """A listing the size of d99724f2's (the real listing was not kept): the kernels the run launched and
    others, none of them named block_reduce, as the draft D14 run's gate found there."""
    filler = tuple(f"other_kernel_{i}" for i in range(SYMBOLS_IN_NEW - len(launched)))
    return KernelSymbols("libggml-cuda.so.0.21.0", "cuobjdump -symbols | c++filt", tuple(launched) + filler)


def rejudged(registry, runs: Path, entry_id: str, tree: str) -> Attempt:
    """The candidate run's logs through observe and judge with the final entry, its launches as the
    run listed them, the control the run passed, and the new tree's symbol listing."""
    entry, run_id = registry.get(entry_id), CANDIDATE_RUNS[(entry_id, tree)]
    logs = runs / run_id / "logs"
    cmd = json.loads((logs / "fast-1.cmd.json").read_text())
    listed = cmd["env_overrides"].get("KVDIAG_PRINT_LAUNCHES") == "1"
    step = entry.default_step
    obs = observe(step, [recorded_result(logs)], [logs / "fast-1.sanitizer.log"], launch_listed=listed)
    recorded = run_json(runs, run_id)["outcome"]["attempts"][0]["evidence"]
    symbols = new_tree_symbols(recorded.get("launched") or [])
    launch = LaunchContext(symbols=lambda: symbols, commit=OLD if tree == "old" else NEW)
    return judge_attempt(entry, obs, Gate(True, CONTROL), 1, 1.0, launch=launch)


# ------------------------------------------------------------------ the runs are the ones named

@pytest.mark.parametrize("key", sorted(CANDIDATE_RUNS))
def test_each_candidate_run_is_the_tree_and_the_entrys_command(registry, runs, key):
    """Each run is the entry's on the tree named, and its step is the final entry's fast step: the same
    op, params, sanitizer, options and print limit, so the recorded logs are what the entry runs."""
    entry_id, tree = key
    data = run_json(runs, CANDIDATE_RUNS[key])
    assert data["entry"] == entry_id and data["status"] == "finished"
    assert data["target"]["build"]["git"]["commit"] == (OLD if tree == "old" else NEW)
    assert data["target"]["build"]["build_dir"] == f"<device>/{tree}/build"
    ran, step = data["arm"]["repro"]["step"], registry.get(entry_id).default_step
    assert (ran["argv"], ran["vars"], ran["sanitizer"], ran["sanitizer_options"], ran["print_limit"]) == (
        list(step.argv), dict(step.vars), step.sanitizer, list(step.sanitizer_options), step.print_limit)
    assert data["target"]["environment"]["gpu"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_the_device_said_confirmed_on_the_old_tree_and_not_reproduced_on_the_new():
    for (entry_id, tree), run_id in CANDIDATE_RUNS.items():
        verdict = json.loads((SESSION / f"verdict-candidates-{entry_id}-{tree}.json").read_text())
        assert verdict["verdict"] == ("confirmed" if tree == "old" else "not-reproduced"), (entry_id, tree)


# ------------------------------------------------------------------ judged again with the final entries

@pytest.mark.parametrize("entry_id", ["D14", "D15", "D16"])
def test_the_old_tree_is_confirmed_quoting_the_site(registry, runs, entry_id):
    attempt = rejudged(registry, runs, entry_id, "old")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    kind = "race-hazard"
    assert f"of kind {kind} at " in attempt.reason
    seen = {s["site"] for s in attempt.evidence.sites}
    assert seen & OLD_SITES[entry_id] and seen <= OLD_SITES[entry_id] | {"uninitialized_copy.cuh:60"}
    assert any(re.search(r"(cpy\.cu|ssm-scan\.cu|common\.cuh):\d+", line) for line in attempt.evidence.quoted)


@pytest.mark.parametrize("entry_id, launched", [
    ("D14", "cpy_scalar_transpose<__half>, cpy_scalar_transpose<float>, cpy_scalar_transpose<__nv_bfloat16>, "
            "cpy_scalar_transpose<int>"),
    ("D15", "ssm_scan_f32<128, 16, 0>"),
])
def test_the_new_tree_is_not_reproduced_with_the_kernel_launched(registry, runs, entry_id, launched):
    attempt = rejudged(registry, runs, entry_id, "new")
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert attempt.reason.endswith(f"the signature did not match; {CONTROL}; launched under racecheck: {launched}")
    assert attempt.evidence.cases_failed == 0 and attempt.evidence.sites == ()


def test_d16_on_the_new_tree_is_not_reproduced(registry, runs):
    """block_reduce is an inlined device function: racecheck names it, no launch or symbol does. The
    device gave not-applicable for the same logs (the launch-proof gate took the function for a kernel,
    issue #41); the engine now judges them not-reproduced."""
    attempt = rejudged(registry, runs, "D16", "new")
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert "212 matching case(s) executed (212 OK, 0 FAIL)" in attempt.reason


@pytest.mark.parametrize("entry_id, racecheck_name, launched_name", [
    ("D14", "cpy_scalar_transpose", "cpy_scalar_transpose<float>"),
    ("D15", "ssm_scan_f32", "ssm_scan_f32<128, 16, 0>"),
    ("D16", "block_reduce", None),
])
def test_the_kernel_regex_matches_racecheck_and_the_launch_probe_alike(registry, entry_id, racecheck_name,
                                                                      launched_name):
    """racecheck prints a function's bare name, the launch probe a canonical instantiation (name<args>):
    the entry's regex must take both, and nothing else of its family (ssm_scan_f32_group)."""
    (pattern,) = {m.kernel for m in registry.get(entry_id).signature}
    assert re.search(pattern, racecheck_name)
    if launched_name:
        assert re.search(pattern, launched_name)
    assert not re.search(pattern, racecheck_name + "_group<4, 128>")


# ------------------------------------------------------------------ the figures the entries quote

def test_the_old_trees_numeric_checks_failed_under_racecheck(runs):
    """The races corrupt results when racecheck changes the scheduling: 3 of 8 CPY, 1 of 3 SSM_SCAN and
    85 of 212 SOFT_MAX cases FAILed on v0.9.7; every case passed on d99724f2."""
    failed = {}
    for (entry_id, tree), run_id in CANDIDATE_RUNS.items():
        ev = run_json(runs, run_id)["outcome"]["attempts"][0]["evidence"]
        failed[(entry_id, tree)] = (ev["cases_failed"], ev["cases_executed"])
    assert failed == {("D14", "old"): (3, 8), ("D14", "new"): (0, 8), ("D15", "old"): (1, 3),
                      ("D15", "new"): (0, 9), ("D16", "old"): (85, 212), ("D16", "new"): (0, 212)}


def test_the_old_trees_race_errors_are_at_the_entries_sites(runs):
    counts = {}
    for entry_id in ("D14", "D15", "D16"):
        text = (runs / CANDIDATE_RUNS[(entry_id, "old")] / "logs" / "fast-1.sanitizer.log").read_text()
        report = parse_sanitizer(text, tool="racecheck")
        counts[entry_id] = sorted(f"{f.file}:{f.line}" for f in report.findings
                                  if f.severity == "error")
    assert counts["D14"] == ["cpy.cu:74"] * 6
    assert counts["D15"] == ["ssm-scan.cu:78", "ssm-scan.cu:79"]
    assert counts["D16"] == ["common.cuh:601"] * 2 + ["common.cuh:606"] * 85


def test_the_drafts_stores_are_kept_and_confirmed_on_the_old_tree(runs):
    verdicts = [run_json(runs, run_id)["outcome"]["verdict"] for run_id in DRAFT_RUNS]
    assert verdicts == ["confirmed", "not-applicable", "confirmed", "inconclusive", "confirmed", "inconclusive"]
