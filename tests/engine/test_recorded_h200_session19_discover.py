"""Device session 19 on an H200 (tests/fixtures/device/h200-session19): what a synccheck record costs, and
discovery without device frames, on ggml d99724f2 built there.

Recorded: D2's 40 cases raw under each --show-backtrace/--print-limit pair; `kvdiag scan D2 --params hsk`
on its first call; the whole suite under racecheck and synccheck with device frames, stopped at 540 s;
FLASH_ATTN_EXT under synccheck without frames (the whole op); TOP_K under racecheck, stopped at 170 s.
The raw logs are read again with the parser, and a racecheck batch is judged again with ``judge_process``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

from kvdiag.engine.discover.batch import Unit, judge_interrupted
from kvdiag.engine.discover.findings import from_sanitizer
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz, recorded, rejudge  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-session19"
D2_SITE = ("fattn-mma-f16.cuh", 1538)


def document(name: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"{name}.json.gz"))


def flags_log(variant: str):
    return split_cases(strip_ansi(read_gz(FIXTURE / "flags" / f"{variant}.log.gz")), "synccheck")


def test_without_device_frames_the_same_cases_report_d2_at_the_same_line():
    framed, frameless = flags_log("device-0"), flags_log("no-0")
    with_findings = {v: {s.case.params for s in split.segments if s.findings}
                     for v, split in (("device", framed), ("no", frameless))}
    assert len(with_findings["device"]) == 39 and with_findings["device"] == with_findings["no"]
    for split in (framed, frameless):
        assert {(f.file, f.line) for s in split.segments for f in s.findings} == {D2_SITE}
    # The tool counts differently without frames: 512 or 1024 a case with them, 257 or 514 without.
    assert {s.error_count for s in framed.segments if s.findings} == {512, 1024}
    assert {s.error_count for s in frameless.segments if s.findings} == {257, 514}
    assert sum(s.error_count for s in framed.segments) == 20480


def test_a_frameless_record_names_its_inlined_function_as_the_kernel():
    framed = next(f for s in flags_log("device-0").segments for f in s.findings)
    frameless = next(f for s in flags_log("no-0").segments for f in s.findings)
    assert from_sanitizer(framed, "synccheck").kernel.startswith("flash_attn_ext_f16<")
    assert from_sanitizer(frameless, "synccheck").kernel.startswith("flash_attn_ext_f16_process_tile<")
    assert frameless.kernel_name == framed.kernel_name == "flash_attn_ext_f16_process_tile"


def test_what_each_flag_pair_cost_is_recorded_with_its_error_summary():
    lines = (FIXTURE / "flags" / "summary.txt").read_text().splitlines()
    walls = {line.split()[0]: float(line.split("wall=")[1].split()[0]) for line in lines if "wall=" in line}
    assert walls == {"device:0": 10.83, "no:0": 3.96, "device:1": 7.61, "no:1": 3.37}
    assert walls["no:0"] < 0.4 * walls["device:0"]       # frames, not printing, are most of a record's cost
    assert walls["device:1"] > walls["no:0"]             # capturing them costs even when nothing is printed
    first = json.loads((FIXTURE / "flags" / "first-bench.json").read_text())["variants"]
    assert first["plain"]["wall_s"] == 1.82 and first["plain"]["errors"] is None
    # Without --destroy-on-device-error kernel the framed run ended at the first case's records.
    assert (first["device:0"]["returncode"], first["device:0"]["errors"]) == (6, 512)


def test_fa_under_synccheck_without_frames_judged_every_case_and_found_exactly_the_cases_scan_d2_confirmed():
    doc, scan = document("fa-synccheck-backtrace-no"), document("scan-d2")
    assert doc["backtrace"] == "no" and doc["interrupted"] is False and doc["workers"] == 16
    assert doc["totals"]["all"] == {"clean": 1603, "findings": 1333, "aborted": 0, "not-supported": 0,
                                    "spared": 0, "cut": 0}
    assert round(doc["wall_s"], 1) == 62.3 and len(doc["processes"]) == 92
    assert round(sum(p["wall_s"] for p in doc["processes"])) == 666
    [root] = doc["roots"]
    assert (root["site"], root["known"], root["cases"]) == ("src/ggml-cuda/fattn-mma-f16.cuh:1538", "D2", 1333)
    assert root["kernels"] == {"flash_attn_ext_f16_process_tile": 2051}    # the inlined function, no frames
    confirmed = {p for p, c in scan["cases"].items() if c["verdict"] == "confirmed"}
    assert confirmed == {c["params"] for c in doc["cases"] if c["state"] == "findings"}
    assert Counter(c["verdict"] for c in scan["cases"].values()) == {"confirmed": 1333, "not-applicable": 902,
                                                                      "not-reproduced": 701}


def test_fa_s_sliced_synccheck_batches_cost_about_the_same_a_case_however_many_kernel_shapes_they_mixed():
    """Would batching FLASH_ATTN_EXT's cases by kernel save the sanitizer's per-kernel work? In this run its
    batches were consecutive slices of the listing, some holding few kernel shapes and some many. A shape,
    a proxy for the instantiation that runs: hsk, hsv, the K type, one Q column or more, the GQA ratio, the
    precision and whether a softcap is set. Batches of 4 to 7 shapes took 0.234 s a case, of 16 to 23
    shapes 0.245 s (correlation 0.10 over the 92 batches): grouping by kernel would save a few percent,
    not the half that the H100's dealt run (0.447 s a case in device session 20, another machine) might
    suggest."""
    doc = document("fa-synccheck-backtrace-no")
    by_log: dict[str, list[dict]] = {}
    for case in doc["cases"]:
        if case["state"] in ("clean", "findings"):
            by_log.setdefault(case["log"], []).append(case)
    assert len(by_log) == 92 and sum(map(len, by_log.values())) == 2936

    def shape(params: str) -> tuple:
        value = {k: v for k, v in re.findall(r"(\w+)=(\[[^\]]*\]|[^,]+)", params)}
        return (value["hsk"], value["hsv"], value["type_K"], value["nb"] == "1", value["nr23"], value["prec"],
                value["logit_softcap"] != "0.000000")

    few, many, points = [], [], []
    for cases in by_log.values():
        shapes = len({shape(c["params"]) for c in cases})
        per_case = cases[0]["duration_s"]          # a batch's wall shared evenly by its cases
        if shapes <= 7:
            few.append(per_case)
        elif shapes >= 16:
            many.append(per_case)
        points.append((shapes, per_case))
    assert round(statistics.correlation(*zip(*points)), 2) == 0.10
    assert (len(few), len(many)) == (18, 16)
    assert round(sum(few) / len(few), 3) == 0.234 and round(sum(many) / len(many), 3) == 0.245


def test_the_whole_suite_with_frames_started_racecheck_while_synccheck_was_still_listing():
    doc = document("whole")
    assert doc["backtrace"] == "device" and doc["interrupted"] is True and round(doc["wall_s"]) == 540
    assert doc["routing"]["source"] == "synccheck" and doc["routing"]["spared"] == 5135
    racecheck = sorted(int(p["process"].split("-")[1]) for p in doc["processes"] if p["tool"] == "racecheck")
    assert len(racecheck) == 103 and racecheck[0] == 128       # of 383: the router released batches as they filled
    spared = [c for c in doc["cases"] if c["state"] == "spared"]
    assert spared and all(c["shared_memory"] == 0 and c["launches"] for c in spared)
    assert doc["totals"]["judged"] == 16943 and doc["totals"]["cut"] == 6941
    seconds = Counter()
    for p in doc["processes"]:
        seconds[(p["op"], p["tool"])] += p["wall_s"]
    assert seconds.most_common(1)[0][0] == ("FLASH_ATTN_EXT", "synccheck")
    assert round(seconds[("FLASH_ATTN_EXT", "synccheck")]) == 2888
    assert [(r["site"], r["known"]) for r in doc["roots"]] == [("src/ggml-cuda/fattn-mma-f16.cuh:1538", "D2")]
    warnings = {r["site"]: r["cases"] for r in doc["warnings"]}
    assert warnings["src/ggml-cuda/mmid.cu:98"] == 204 and warnings["src/ggml-cuda/mmid.cu:54"] == 100


def test_a_mul_mat_id_racecheck_batch_judged_again_gives_the_recorded_warnings():
    doc = document("whole")
    unit, records, result = rejudge("whole", "racecheck-00230", folder=FIXTURE)
    assert unit.op == "MUL_MAT_ID" and len(unit.cases) == 32 and result["description"] == "exit 99"
    saved = recorded(doc, "racecheck-00230", "racecheck")
    assert {r.params: r.state for r in records} == {p: c["state"] for p, c in saved.items()}
    sites = {(f.file, f.line) for r in records for f in r.findings}
    assert sites == {("mmid.cu", 54), ("mmid.cu", 88), ("mmid.cu", 98)}
    assert all(f.is_warning for r in records for f in r.findings)


def test_top_k_under_racecheck_has_batches_longer_than_its_170_s_deadline():
    doc = document("topk-racecheck")
    assert doc["totals"]["all"]["clean"] == 190 and doc["totals"]["cut"] == 110
    sanitized = [p for p in doc["processes"] if p["tool"] == "racecheck"]
    done = sorted(p["wall_s"] for p in sanitized if p["judged"])
    assert len(done) == 10 and round(done[0], 1) == 6.5 and round(done[-1], 1) == 134.6
    running = [p for p in sanitized if not p["judged"]]
    # Six batches (19 or 15 cases) still ran at the deadline; an interrupted batch is cut whole.
    assert len(running) == 6 and all(p["wall_s"] > 165 and p["cases"] >= 15 for p in running)
    assert all(p["why"].startswith("interrupted") for p in running)


def interrupted(process: str):
    """A process the deadline stopped, judged again: the cases that printed a status, the rest cut."""
    record = json.loads(read_gz(FIXTURE / "logs" / "whole" / f"{process}.cmd.json.gz"))
    argv = record["argv"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    tool = argv[argv.index("--tool") + 1]
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / f"{process}.stdout.log.gz"))
    assert record["result"]["interrupted"] is True
    unit = Unit(tool, argv[argv.index("-o") + 1], cases)
    return unit, judge_interrupted(unit, split_cases(text, tool), name=process, log=None,
                                   wall_s=record["result"]["duration_s"], listed=tool != "racecheck")


def test_an_interrupted_batch_judges_the_cases_that_printed_a_status_as_a_whole_run_judges_them():
    unit, outcome = interrupted("synccheck-00381")
    states = [r.state for r in outcome.records]
    assert states == ["findings"] * 4 + ["cut"] * 28 and outcome.row["judged"] == 4
    whole_op = {c["params"]: c["state"] for c in document("fa-synccheck-backtrace-no")["cases"]}
    assert all(whole_op[r.params] == r.state for r in outcome.records if r.state != "cut")
    assert {(f.file, f.line) for r in outcome.records for f in r.findings} == {D2_SITE}
    assert all(r.why == "interrupted (Ctrl-C) before it was judged" for r in outcome.records if r.state == "cut")


def test_an_interrupted_top_k_racecheck_batch_keeps_its_25_finished_cases():
    unit, outcome = interrupted("racecheck-00325")
    assert unit.op == "TOP_K" and [r.state for r in outcome.records] == ["clean"] * 25 + ["cut"] * 7
    topk = {c["params"]: c["state"] for c in document("topk-racecheck")["cases"]}
    assert all(topk[r.params] in ("clean", "cut") for r in outcome.records)      # no run saw a finding in them
