"""Device session 16 on an H100 (tests/fixtures/device/h100-session16): issue #41's sweeps of six trees.

Six upstream trees, 2025-08-06 to 2026-08-21, in the three forms users have them: release tarballs
without .git (llama.cpp b6100 and b9000, ggml v0.18.0), shallow clones of a release tag (ggml v0.9.4
and v0.9.7) and a full clone (ggml d99724f2). Each was built for sm_90 with -lineinfo and swept with
`kvdiag sweep` and nothing else: no --history, no tuning. The saved sweeps are read back here; the raw
logs of every run are in store.tar.xz.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from engine_helpers import FIXTURES, recorded_command, unpacked_store
from kvdiag.controls.gate import Gate
from kvdiag.engine.evidence.launch_proof import LaunchContext
from kvdiag.engine.evidence.observe import observe
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.parse.launches import parse_launches
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry
from kvdiag.report.formats import key_evidence
from kvdiag.store.sweeps import Sweep

SESSION = FIXTURES / "device" / "h100-session16"
CODES = {"C": "confirmed", "N": "not-reproduced", "A": "not-applicable", "S": "skipped", "I": "inconclusive"}
# tree -> (form, date of its commit, the verdicts its sweep gave, in id order)
TREES = {
    "llama-b6100": ("tarball", "2025-08-06",
                    "D1=A D2=C D3=S D4=A D5=A D6=N D7=A D8=A D9=A D10=A D11=I D12=I D13=N D14=A D15=I D16=N"),
    "ggml-v0.9.4": ("shallow", "2025-09-30",
                    "D1=A D2=C D3=A D4=A D5=A D6=N D7=A D8=A D9=A D10=A D11=I D12=I D13=N D14=A D15=C D16=N"),
    "ggml-v0.9.7": ("shallow", "2026-02-15",
                    "D1=A D2=C D3=A D4=A D5=A D6=A D7=A D8=A D9=A D10=A D11=I D12=I D13=N D14=C D15=C D16=C"),
    "llama-b9000": ("tarball", "2026-05-01",
                    "D1=N D2=C D3=S D4=A D5=A D6=A D7=A D8=A D9=A D10=A D11=I D12=N D13=N D14=N D15=C D16=C"),
    "ggml-v0.18.0": ("tarball", "2026-07-30",
                     "D1=N D2=C D3=A D4=A D5=A D6=A D7=A D8=A D9=A D10=A D11=N D12=N D13=N D14=N D15=N D16=C"),
    "ggml-d99724f2": ("full", "2026-08-21",
                      "D1=N D2=C D3=A D4=A D5=A D6=N D7=A D8=A D9=A D10=A D11=N D12=N D13=N D14=N D15=N D16=N"),
}
# The inconclusives the sweeps gave that later changes settle (each has its own test below):
# D12's first probe needed --test-file, which these trees' test-backend-ops lacks (the probe now throws
# from the params filter, and D12 runs on the CPU backend: its runs on CPU builds of all three trees are
# not-reproduced, below; not yet run on the device); D15 on b6100 printed only the races of another
# kernel, which became D17 and is set apart (judged again from the same logs below).
SETTLED_SINCE = {("llama-b6100", "D12"), ("ggml-v0.9.4", "D12"), ("ggml-v0.9.7", "D12"), ("llama-b6100", "D15")}


def sweep_of(tree: str) -> Sweep:
    with gzip.open(SESSION / "sweeps" / f"{tree}.json.gz", "rt") as f:
        return Sweep.from_dict(json.load(f))


def outcomes(tree: str) -> dict:
    return {o.entry_id: o for o in sweep_of(tree).outcomes}


def test_six_trees_span_a_year_in_the_three_forms_and_include_ggml_standalone():
    forms = {form for form, _, _ in TREES.values()}
    dates = sorted(date for _, date, _ in TREES.values())
    assert forms == {"tarball", "shallow", "full"} and (dates[0], dates[-1]) == ("2025-08-06", "2026-08-21")
    assert any(t.startswith("ggml-") for t in TREES) and any(t.startswith("llama-") for t in TREES)
    trees = dict(line.split(" ", 1) for line in (SESSION / "trees.txt").read_text().splitlines())
    assert trees["llama-b6100"] == trees["llama-b9000"] == trees["ggml-v0.18.0"] == "git=none shallow=-"
    assert trees["ggml-v0.9.4"].endswith("shallow=true") and trees["ggml-v0.9.7"].endswith("shallow=true")
    assert trees["ggml-d99724f2"] == "git=d99724f2 shallow=false"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_each_sweep_is_as_recorded_with_every_entry_judged(tree):
    said = {o.entry_id: o.verdict.value for o in sweep_of(tree).outcomes}
    expected = dict(pair.split("=") for pair in TREES[tree][2].split())
    assert said == {entry: CODES[code] for entry, code in expected.items()}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_at_most_one_inconclusive_per_tree_once_the_settled_ones_are_counted_out(tree):
    left = [e for e, o in outcomes(tree).items()
            if o.verdict is Verdict.INCONCLUSIVE and (tree, e) not in SETTLED_SINCE]
    assert len(left) <= 1, left
    for entry in left:          # D11 wherever it is left: present by range, no f16 CONCAT case; the probe says how
        reason = outcomes(tree)[entry].reason
        assert entry == "D11" and "would exercise it: a CONCAT case matching /type=f16/" in reason
        assert "kvdiag probe apply D11-f16-concat-cases" in reason


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_gpu_run_names_the_instantiations_it_launched_and_how_they_were_listed(tree):
    """CUPTI injection on the trees the launch probe's patch does not fit (every one before v0.18.0),
    the launch probe on the newer ones; a sanitized step is listed by a bare run of its commands."""
    ran = [o for o in sweep_of(tree).outcomes
           if o.attempts and o.attempts[0].evidence.launched]
    assert {o.entry_id for o in ran} >= {"D2"}
    listers = {o.attempts[0].evidence.launch_listing.split(" (")[0] for o in ran}
    assert listers == ({"launch probe"} if tree in ("ggml-v0.18.0", "ggml-d99724f2") else {"CUPTI injection"})
    d2 = outcomes(tree)["D2"].attempts[0].evidence
    assert any(k.startswith("flash_attn_ext_f16<256, 256,") for k in d2.launched)


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_range_says_how_the_tree_was_placed(tree):
    """Without .git or with a shallow one, by blob match against the shipped index; a full clone by git.
    An entry whose ranges name only other repositories says so."""
    table = (SESSION / "sweeps" / f"{tree}.txt").read_text()
    for entry, o in outcomes(tree).items():
        if o.range is None or o.range.status == "none":
            continue
        summary = o.range.summary
        if tree == "ggml-d99724f2":
            # by git; an entry whose ranges are only another repository's says which repository this is
            assert (o.range.placement == "git" and "ancestor" in summary
                    or o.range.placement is None and "this tree is ggml; the entry records" in summary), (entry, summary)
        elif o.range.status == "unknown":
            assert o.range.placement == "unplaced" and "no .git" in summary, (entry, summary)
            assert "entry records ranges only for" in summary, (entry, summary)
        else:
            assert o.range.placement == "index" and "placed by blob match of" in summary, (entry, summary)
            assert "shipped index" in summary, (entry, summary)
    tags = {"ggml-d99724f2": "[git]"}.get(tree, "[index]")
    assert tags in table


def test_the_table_names_the_matching_site_of_d15_not_cubs_warnings():
    """The sweep's table printed "? error(s) at uninitialized_copy.cuh:60 (+2 sites)" for D15 on v0.9.7;
    read again, the key evidence names the race the signature matched."""
    assert key_evidence(outcomes("ggml-v0.9.7")["D15"]) == "2 printed finding(s) at ssm-scan.cu:79 (+2 sites)"
    assert "? error(s) at uninitialized_copy.cuh:60" in (SESSION / "sweeps" / "ggml-v0.9.7.txt").read_text()


# ------------------------------------------------------------------ the raw logs, judged again

CONTROL = "racecheck control passed on this machine on 2026-12-06 (launcher cupy)"
INSIDE_D17, PAST_D17 = ("llama-b6100", "ggml-v0.9.4"), ("ggml-v0.9.7", "llama-b9000", "ggml-v0.18.0", "ggml-d99724f2")


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


@pytest.fixture(scope="module")
def homes(tmp_path_factory) -> Path:
    return unpacked_store(tmp_path_factory, SESSION / "store.tar.xz")


def run_dir(homes: Path, tree: str, entry_id: str) -> Path:
    (found,) = (homes / f"home-{tree}" / "runs").glob(f"*-{entry_id}")
    return found


def rejudged(registry, homes: Path, tree: str, entry_id: str, ran_as: str = "D15"):
    """The sanitized run of ``ran_as``'s fast step on ``tree``, judged by ``entry_id``: its launches as the
    bare CUPTI or probe listing gave them, the control the sweep passed, no symbol listing (kept out)."""
    entry, logs = registry.get(entry_id), run_dir(homes, tree, ran_as) / "logs"
    obs = observe(entry.default_step, [recorded_command(logs, "fast-1")], [logs / "fast-1.sanitizer.log"])
    bare = logs / "fast-1-launches-1.stdout.log"
    text = bare.read_text() if bare.is_file() else (logs / "fast-1.stdout.log").read_text()
    obs = dataclasses.replace(obs, launches=parse_launches(text), launch_listed=True,
                              launch_lister="CUPTI injection" if bare.is_file() else "launch probe")
    return judge_attempt(entry, obs, Gate(True, CONTROL), 1, 1.0, launch=LaunchContext(symbols=None))


def test_d15s_runs_are_the_command_d17_runs(registry, homes):
    """D17's fast step is D15's, so D15's recorded runs are D17's runs too."""
    d15, d17 = registry.get("D15").default_step, registry.get("D17").default_step
    assert (d15.argv, dict(d15.vars), d15.sanitizer, d15.sanitizer_options, d15.print_limit) == (
        d17.argv, dict(d17.vars), d17.sanitizer, d17.sanitizer_options, d17.print_limit)
    for tree in TREES:
        ran = json.loads((run_dir(homes, tree, "D15") / "run.json").read_text())["arm"]["repro"]["step"]
        assert (ran["argv"], ran["vars"], ran["sanitizer_options"], ran["print_limit"]) == (
            list(d17.argv), dict(d17.vars), list(d17.sanitizer_options), d17.print_limit)


@pytest.mark.parametrize("tree", INSIDE_D17)
def test_d17_is_confirmed_inside_its_range_quoting_the_group_kernels_race(registry, homes, tree):
    attempt = rejudged(registry, homes, tree, "D17")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    quoted = "\n".join(attempt.evidence.quoted)
    assert "ssm_scan_f32_group<(int)16, (int)128>" in quoted
    read, write = {"llama-b6100": ("178", "148"), "ggml-v0.9.4": ("208", "178")}[tree]
    assert "Read access at" in quoted and f"ssm-scan.cu:{read}" in quoted and f"ssm-scan.cu:{write}" in quoted
    assert attempt.evidence.cases_failed >= 2        # both Mamba-2 cases FAILed their numeric check


@pytest.mark.parametrize("tree", PAST_D17)
def test_d17_is_not_reproduced_past_the_fix_with_the_group_kernel_launched(registry, homes, tree):
    attempt = rejudged(registry, homes, tree, "D17")
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert "ssm_scan_f32_group<" in attempt.reason.split("launched under racecheck: ")[1]
    assert not any(s["kernel"] == "ssm_scan_f32_group" for s in attempt.evidence.sites)


def test_d15_on_b6100_is_not_reproduced_setting_d17s_race_apart(registry, homes):
    """The sweep said inconclusive ("a different sanitizer finding: 6 error(s) at ssm-scan.cu:178"). D15's
    own kernel was launched and printed nothing; all six findings are D17's signature, an entry D15 names
    as related, so they are set apart and named, and the verdict is D15's."""
    attempt = rejudged(registry, homes, "llama-b6100", "D15")
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert attempt.reason.startswith("3 matching case(s) executed (1 OK, 2 FAIL); the signature did not match; "
                                     "the other findings: 6 of D17's signature (ssm-scan.cu:178); ")
    assert attempt.reason.endswith("launched under racecheck: ssm_scan_f32<128, 16>")
    assert {s["kernel"] for s in attempt.evidence.sites} == {"ssm_scan_f32_group"}


@pytest.mark.parametrize("tree", ["ggml-v0.9.7", "llama-b9000"])
def test_d17_past_its_fix_sets_d15s_race_and_cubs_warnings_apart(registry, homes, tree):
    attempt = rejudged(registry, homes, tree, "D17")
    assert ("the other findings: 2 of D15's signature (ssm-scan.cu:79, ssm-scan.cu:78), 16 racecheck warning(s)"
            in attempt.reason)


def test_without_the_relation_the_same_logs_stay_inconclusive(registry, homes):
    """The sweep's verdict, from the same logs: an entry that names no related entry cannot set them apart."""
    from dataclasses import replace as replaced

    class Alone:
        def get(self, entry_id):
            return replaced(registry.get(entry_id), neighbours=())

    attempt = rejudged(Alone(), homes, "llama-b6100", "D15")
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert attempt.reason == "a different sanitizer finding: 6 error(s) at ssm-scan.cu:178, ssm-scan.cu:178"


# ------------------------------------------------------------------ D12's probes

def test_d12s_first_probe_proved_nothing_on_the_oldest_trees(registry, homes):
    """--test-file is unknown to these test-backend-ops: usage, exit 1, no throw."""
    for tree in ("llama-b6100", "ggml-v0.9.4", "ggml-v0.9.7"):
        logs = run_dir(homes, tree, "D12") / "logs"
        assert "--test-file" in json.loads((logs / "throw-probe-1.cmd.json").read_text())["result"]["argv"]
        assert (logs / "throw-probe-1.stdout.log").read_text().startswith("Usage: ")
        obs = observe(registry.get("D12").default_step, [recorded_command(logs, "throw-probe-1")], [])
        attempt = judge_attempt(registry.get("D12"), obs, Gate(True, "no sanitizer"), 1, 1.0)
        assert attempt.verdict is Verdict.INCONCLUSIVE
        assert attempt.reason == r"the path did not run as expected: /what\(\):\s+\S/ not seen (exit 1)"


@pytest.mark.parametrize("tree", ["b6100", "v0.9.4", "v0.9.7", "d99724f2"])
def test_d12s_probe_throws_from_the_params_filter_old_tree_and_new(registry, tree, tmp_path):
    """The current probe on llama.cpp b6100, ggml v0.9.4 and v0.9.7, which have no --test-file, and on
    d99724f2, built for the CPU (tests/fixtures/device/cpu-d12-params-probe): the filter `(` makes
    std::regex throw, nothing catches it, SIGABRT: not-reproduced, the record's verdict and the engine's
    on the logs again."""
    logs = FIXTURES / "device" / "cpu-d12-params-probe" / tree
    assert json.loads((logs / "run.json").read_text())["outcome"]["verdict"] == "not-reproduced"
    result = json.loads((logs / "throw-probe-1.cmd.json").read_text())["result"]
    assert result["argv"][-5:] == ["test", "-b", "CPU", "-p", "("] and result["signal"] == 6
    assert "what():  Mismatched '(' and ')' in regular expression" in (logs / "throw-probe-1.stderr.log").read_text()
    combined = tmp_path / "throw-probe-1.combined.log"
    combined.write_text((logs / "throw-probe-1.stdout.log").read_text() + (logs / "throw-probe-1.stderr.log").read_text())
    obs = observe(registry.get("D12").default_step, [recorded_command(logs, "throw-probe-1", combined)], [])
    attempt = judge_attempt(registry.get("D12"), obs, Gate(True, "no sanitizer"), 1, 1.0)
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert attempt.reason.startswith("the expected path ran (seen: \"what():  Mismatched '(' and ')' in regular "
                                     "expression\"; killed by SIGABRT (6))")


def test_the_old_probe_on_the_same_v094_build_printed_its_usage():
    logs = FIXTURES / "device" / "cpu-d12-params-probe" / "v0.9.4"
    assert (logs / "test-file-probe.combined.log").read_text().startswith("Usage: ")


def test_setting_findings_apart_never_makes_a_not_reproduced_of_a_walk_that_reached_no_case(registry, homes,
                                                                                           tmp_path):
    """The same b6100 D15 logs with test-backend-ops' case lines gone: D17's findings are still set
    apart, but no matching case executed, so nothing shows D15 absent and the verdict is not
    not-reproduced (the rule for unreached cases comes first)."""
    import shutil

    logs = tmp_path / "logs"
    shutil.copytree(run_dir(homes, "llama-b6100", "D15") / "logs", logs)
    for name in ("fast-1.stdout.log", "fast-1.combined.log"):
        kept = [ln for ln in (logs / name).read_text().splitlines(keepends=True) if "SSM_SCAN(" not in ln]
        (logs / name).write_text("".join(kept))
    entry = registry.get("D15")
    obs = observe(entry.default_step, [recorded_command(logs, "fast-1")], [logs / "fast-1.sanitizer.log"])
    attempt = judge_attempt(entry, obs, Gate(True, CONTROL), 1, 1.0, launch=LaunchContext(symbols=None))
    assert attempt.verdict is not Verdict.NOT_REPRODUCED and attempt.verdict is not Verdict.CONFIRMED
    assert "no SSM_SCAN test case matches" in attempt.reason
