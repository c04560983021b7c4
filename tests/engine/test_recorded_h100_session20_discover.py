"""Device session 20 on an H100 (tests/fixtures/device/h100-session20): the whole suite under racecheck and
synccheck with the default `--backtrace auto`, a frameless root's kernels named from its smallest case run
again with frames, and a racecheck error root no entry names (FLASH_ATTN_EXT, hsk=192 and hsv=128).

Recorded on ggml d99724f2 built there: `kvdiag scan D2 --params hsk` three times; FLASH_ATTN_EXT's 40
cases of D2's fast shape under synccheck (the frames follow-up); the whole suite stopped at 600 s; the
raw one-process-per-op racecheck against discover over 12 ops; TOP_K under racecheck stopped at 150 s;
the new root's smallest case under racecheck by hand. The saved documents are read back, and recorded
processes are judged again from their raw logs with ``judge_process``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

from kvdiag.controls.gate import Gate
from kvdiag.engine.discover.batch import Unit, judge_process
from kvdiag.engine.discover.reframe import frames_row
from kvdiag.engine.discover.result import from_document
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.sanitizer import parse_sanitizer
from kvdiag.engine.evidence.observe import observe_segment
from kvdiag.engine.scan.batch import batch_step
from kvdiag.engine.scan.cases import scan_step
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz, recorded, rejudge  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session20"
SESSION16 = FIXTURE.parent / "h100-session16" / "scan"
FP16_SITE = ("cuda_fp16.h", 5122)
FP16_SMALLEST = ("hsk=192,hsv=128,nh=4,nr23=[8,1],kv=512,nb=75,mask=1,sinks=1,max_bias=0.000000,"
                 "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,2,1,3],kv_view=1,"
                 "v_is_view_of_k=0")


def document(name: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"{name}.json.gz"))


def test_the_machine_is_one_h100_and_the_build_took_192_s():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3" in env and "2025.3.1" in env and "cores 16" in env
    chain = {line.split()[2]: int(line.split()[0]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}
    assert chain["built"] - chain["build"] == 192


def test_the_whole_suite_with_the_default_backtrace_did_not_fit_600_s_on_nine_busy_slots():
    doc = document("whole")
    assert doc["backtrace"] == "auto" and doc["interrupted"] is True and doc["workers"] == 9
    assert round(doc["wall_s"]) == 599 and len(doc["processes"]) == 298
    assert doc["totals"]["judged"] == 11663 and doc["totals"]["cut"] == 12221
    spent = Counter()
    for p in doc["processes"]:
        spent[(p["op"], p["tool"])] += p["wall_s"]
    assert round(sum(spent.values())) == 5327
    # FLASH_ATTN_EXT is the bound: racecheck sanitizes each of its cases (every launch holds shared memory).
    assert [k for k, _ in spent.most_common(2)] == [("FLASH_ATTN_EXT", "racecheck"), ("FLASH_ATTN_EXT", "synccheck")]
    assert round(spent[("FLASH_ATTN_EXT", "racecheck")]) == 2673 and round(spent[("FLASH_ATTN_EXT", "synccheck")]) == 1201
    # Nothing idled: nine sanitizer processes kept 15 of 16 cores and the GPU busy.
    assert round(_busy_cores(), 1) == 15.1 and round(_gpu_use()) == 96
    # ... while they held at most 6758 MiB of the GPU's memory together.
    assert max(int(line.split()[3]) for line in read_gz(FIXTURE / "gpu.csv.gz").splitlines()) == 6758


def test_four_cases_with_512_q_columns_held_a_third_of_fa_s_racecheck_time():
    """Where FLASH_ATTN_EXT's racecheck time went: dealt, each of its four 512-column cases (K/V 4096 and
    16384 long) sat in a process of its own, and those four processes took 845 s of the op's 2673 s, while
    the median process spent 0.59 s a case and the other 80 processes 1828 s for their 2560 cases."""
    doc = document("whole")
    processes = [p for p in doc["processes"] if p["op"] == "FLASH_ATTN_EXT" and p["tool"] == "racecheck"]
    assert len(processes) == 84 and all(p["judged"] == p["cases"] == 32 for p in processes)
    heavy = {Path(case["log"]).name.split(".")[0]: re.search(r"kv=(\d+)", case["params"]).group(1)
             for case in doc["cases"] if case["op"] == "FLASH_ATTN_EXT" and case["tool"] == "racecheck"
             and case.get("log") and ",nb=512," in case["params"]}
    assert sorted(heavy.values()) == ["16384", "16384", "4096", "4096"] and len(heavy) == 4
    walls = {p["process"]: p["wall_s"] for p in processes}
    assert sorted(round(walls[name], 1) for name in heavy) == [115.9, 149.8, 242.7, 336.4]
    assert round(sum(walls[name] for name in heavy)) == 845
    assert sorted(walls.values())[-4:] == sorted(walls[name] for name in heavy)      # the op's four longest
    rest = [p for p in processes if p["process"] not in heavy]
    assert len(rest) == 80 and round(sum(p["wall_s"] for p in rest)) == 1828
    assert sum(1 for c in doc["cases"] if c["op"] == "FLASH_ATTN_EXT" and c["tool"] == "racecheck"
               and c["state"] == "cut") == 248
    # The heaviest units start first: these were the op's first four racecheck processes.
    assert sorted(heavy) == sorted(walls)[:4] == ["racecheck-00025", "racecheck-00031", "racecheck-00033",
                                                  "racecheck-00056"]
    assert round(statistics.median(p["wall_s"] / p["cases"] for p in processes), 2) == 0.59


def _busy_cores() -> float:
    rows = [line.split() for line in read_gz(FIXTURE / "cpu.log.gz").splitlines() if " cpu " in f" {line} "]
    fractions = []
    for a, b in zip(rows, rows[1:]):
        before, after = list(map(int, a[2:])), list(map(int, b[2:]))
        total = sum(after) - sum(before)
        idle = (after[3] + after[4]) - (before[3] + before[4])
        fractions.append((total - idle) / total)
    return 16 * statistics.mean(fractions)


def _gpu_use() -> float:
    return statistics.mean(int(line.split()[1].rstrip("%,")) for line in read_gz(FIXTURE / "gpu.csv.gz").splitlines()
                           if line.split()[1].rstrip("%,").isdigit())


def test_the_whole_suite_found_d2_and_a_racecheck_error_root_in_fa_that_no_entry_named():
    result = from_document(document("whole"), load_registry(None).entries)
    roots = {(r.key.site, r.known) for r in result.defects}
    assert roots == {("src/ggml-cuda/fattn-mma-f16.cuh:1538", "D2"), ("cuda_fp16.h:5122", "D18")}  # D18: from it
    fp16 = next(r for r in result.defects if r.key.site == "cuda_fp16.h:5122")
    assert (fp16.key.tool, fp16.key.kind, fp16.key.function, fp16.key.warning) == ("racecheck", "race-hazard",
                                                                                  "__half2::__half2", False)
    assert fp16.cases == 8 and fp16.peers == {"cuda_fp16.hpp:264": 8} and fp16.smallest["params"] == FP16_SMALLEST
    hit = [c["params"] for c in document("whole")["cases"] if c["tool"] == "racecheck" and any(
        f["file"] == "cuda_fp16.h" for f in c["findings"])]
    assert len(hit) == 8 and all(p.startswith("hsk=192,hsv=128,") and ",nb=75," in p for p in hit)


def test_the_fp16_race_judged_again_from_its_batch_and_its_kernel_read_from_synccheck_s_listing():
    doc = document("whole")
    unit, records, result = rejudge("whole", "racecheck-00063", folder=FIXTURE)
    saved = recorded(doc, "racecheck-00063", "racecheck")
    assert unit.op == "FLASH_ATTN_EXT" and {r.params: r.state for r in records} == {p: c["state"] for p, c in saved.items()}
    [hit] = [r for r in records if any((f.file, f.line) == FP16_SITE for f in r.findings)]
    assert hit.params == FP16_SMALLEST and {(f.file, f.line) for f in hit.findings} == {FP16_SITE}
    assert {f.severity for f in hit.findings} == {"error"} and [f.count for f in hit.findings] == [
        107776 + 106496]                   # two records of one site and function: one finding
    # Racecheck's race records carry no device frames; the synccheck process that listed the same case
    # names the one launch holding shared memory.
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / "synccheck-00057.stdout.log.gz"))
    launches = split_cases(text, "synccheck").segment(FP16_SMALLEST).launches
    holding = [launch.kernel for launch in launches if launch.shared_memory]
    assert holding == ["flash_attn_ext_f16<192, 128, 8, 8, false, false>"]
    assert [launch.shared_memory for launch in launches] == [25600, 0]


def test_the_smallest_case_alone_under_racecheck_by_hand_shows_the_same_two_errors():
    text = (FIXTURE / "fp16-race.log").read_text()
    findings = parse_sanitizer(text, "racecheck").findings
    assert {(f.file, f.line) for f in findings} == {FP16_SITE} and len(findings) == 2
    assert {p.file for f in findings for p in f.peers} == {"cuda_fp16.hpp"}
    assert "RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)" in text
    assert f"FLASH_ATTN_EXT({FP16_SMALLEST}): \x1b[1;32mOK" in text          # the numeric test passed anyway


def test_the_frameless_d2_root_was_named_by_its_smallest_case_run_again_with_frames():
    doc = document("reframe")
    assert doc["backtrace"] == "auto" and doc["totals"]["all"]["findings"] == 80 and doc["totals"]["cut"] == 0
    [root] = doc["roots"]
    assert root["kernels"] == {"flash_attn_ext_f16_process_tile": root["printed"]}     # frameless
    [row] = doc["frames"]
    assert row["kernels"] == {"flash_attn_ext_f16": row["kernels"]["flash_attn_ext_f16"]} and row["why"] is None
    assert row["params"] == root["smallest"]["params"] and root["frames"] == row
    # The framed process, judged again, gives the same row.
    cmd = json.loads(read_gz(FIXTURE / "logs" / "reframe" / "frames-00001.cmd.json.gz"))
    argv = cmd["argv"]
    assert argv[argv.index("--show-backtrace") + 1] == "device"
    unit = Unit("synccheck", "FLASH_ATTN_EXT", (row["params"],))
    text = strip_ansi(read_gz(FIXTURE / "logs" / "reframe" / "frames-00001.stdout.log.gz"))
    outcome = judge_process(unit, split_cases(text, "synccheck"), text, name="frames-00001", log=None,
                            wall_s=cmd["result"]["duration_s"], timed_out=False, ended=cmd["result"]["description"],
                            budget_s=120.0, listed=False)
    again = frames_row(from_document(doc).roots[0], outcome.records, doc["relative"])
    assert again["kernels"] == row["kernels"] and again["instantiations"] == row["instantiations"]


def test_scan_d2_on_this_h100_spent_a_third_more_per_case_than_session_16s_h100_on_the_same_tree():
    first, second = document("scan-d2"), document("scan-d2-2")
    assert (round(first["wall_s"], 1), round(second["wall_s"], 1)) == (76.9, 72.9)
    for doc in (first, second):
        assert Counter(c["verdict"] for c in doc["cases"].values()) == {"confirmed": 1333, "not-applicable": 902,
                                                                         "not-reproduced": 701}
    before = json.loads(read_gz(SESSION16 / "scan-D2-hsk-2.json.gz"))
    assert (before["workers"], second["workers"]) == (9, 9) and before["sanitizer_output"] == second["sanitizer_output"]
    assert round(second["sum_case_s"] / before["sum_case_s"], 2) == 1.35          # the same work, a slower machine


def test_the_raw_way_cut_two_ops_at_45_s_where_discover_judged_every_case_in_66_s():
    bench = json.loads((FIXTURE / "raw-vs-discover.json").read_text())
    assert bench["raw"]["wall_s"] == 45.01 and bench["raw"]["cut"] == ["SOFT_MAX", "ARGSORT"]
    assert bench["discover"]["totals"]["judged"] == 997 and bench["discover"]["totals"]["cut"] == 0
    assert bench["discover"]["wall_s"] == 65.75 and bench["ratio_raw_over_discover"] == 0.68


def test_top_k_s_routed_racecheck_batches_took_the_heavy_rows_together():
    """Before the router dealt its cases: each route process gave its cases small to large, and the
    batches filled from them in that order."""
    doc = document("topk-racecheck")
    done = sorted(p["wall_s"] for p in doc["processes"] if p["tool"] == "racecheck" and p["judged"] == p["cases"])
    assert round(done[0], 1) == 9.8 and round(done[-1], 1) == 113.8
    over = [p for p in doc["processes"] if (p.get("why") or "").startswith("over its budget")]
    assert len(over) == 1 and over[0]["cases"] == 32 and over[0]["judged"] == 10
    assert doc["totals"]["judged"] == 256 and doc["totals"]["cut"] == 44


# ---------------------------------------------------------------- D18, the entry drafted from the new root

def test_d18_is_the_root_s_entry_and_its_fast_step_selects_the_root_s_smallest_case():
    registry = load_registry(None)
    result = from_document(document("whole"), registry.entries)
    fp16 = next(r for r in result.defects if r.key.site == "cuda_fp16.h:5122")
    assert fp16.known == "D18"
    d18 = registry.get("D18")
    assert re.search(d18.default_step.vars["params"], FP16_SMALLEST)
    others = [c["params"] for c in document("whole")["cases"] if c["op"] == "FLASH_ATTN_EXT"
              and c["tool"] == "racecheck" and c["params"] != FP16_SMALLEST]
    assert others and not any(re.search(d18.default_step.vars["params"], p) for p in others)
    hit = {c["params"] for c in document("whole")["cases"] if c["tool"] == "racecheck" and c["state"] == "findings"
           and any(f["file"] == "cuda_fp16.h" for f in c["findings"])}
    assert all(re.search(d18.scan.params, p) for p in hit)            # its scan space holds every case hit


def _judged_as(entry_id: str, text: str, params: str, listed: bool = False):
    entry = load_registry(None).get(entry_id)
    split = split_cases(text, "racecheck")
    obs = observe_segment(batch_step(scan_step(entry)), text, split, split.segment(params), listed)
    return judge_attempt(entry, obs, Gate(True, "racecheck's control passed on the H100"), 1, 0.0)


def test_d18_is_confirmed_by_the_smallest_case_run_alone_quoting_the_read_and_the_writes():
    attempt = _judged_as("D18", (FIXTURE / "fp16-race.log").read_text(), FP16_SMALLEST)
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    quoted = "\n".join(attempt.evidence.quoted)
    assert "Read access at __half2::__half2(const __half2&)+0x7ab0 in cuda_fp16.h:5122" in quoted


def test_d18_is_confirmed_in_the_discovery_s_own_batch_and_not_in_its_other_cases():
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / "racecheck-00063.stdout.log.gz"))
    assert _judged_as("D18", text, FP16_SMALLEST).verdict is Verdict.CONFIRMED
    others = [s.case.params for s in split_cases(text, "racecheck").segments if s.case.params != FP16_SMALLEST]
    assert len(others) == 31
    judged = [_judged_as("D18", text, p) for p in others]
    assert {a.verdict for a in judged} == {Verdict.NOT_REPRODUCED}
    # One of them printed a racecheck warning elsewhere (fattn-common.cuh): set apart, not D18's signature.
    assert sum("the other findings: 1 racecheck warning(s)" in a.reason for a in judged) == 1


def test_d18_sites_are_the_lines_racecheck_s_offsets_disassemble_to():
    """tests/fixtures/offline/d18-nvdisasm.txt: the kernel's instance compiled offline with the build's nvcc
    command and disassembled with its line table; every offset racecheck printed maps to a D18 site."""
    table = (FIXTURE.parent.parent / "offline" / "d18-nvdisasm.txt").read_text()
    race = table.split("[race]\n")[1].split("#")[0]
    chains = {}
    for line in race.splitlines():
        offset, _, rest = line.partition("  ")
        chains[int(offset, 16)] = rest
    printed = {int(m, 16) for m in re.findall(r"\+0x([0-9a-f]+) in cuda_fp16", (FIXTURE / "fp16-race.log").read_text())}
    assert printed == set(chains)
    lines = {int(n) for rest in chains.values() for n in re.findall(r"cuda_fp16\.hp*:\d+ <- fattn-mma-f16\.cuh:(\d+)", rest)}
    assert lines == {1670, 1230, 1237}
    d18 = load_registry(None).get("D18")
    recorded = {site["at"]["d99724f2b141"] for site in d18.location["sites"]}
    assert {1670, 1230} <= recorded and "1237" in d18.location["lines"]
    fixed = table.split("[fixed]\n")[1].splitlines()
    assert len(fixed) == 3 and all("BAR.SYNC  fattn-mma-f16.cuh:1693" in line for line in fixed)
