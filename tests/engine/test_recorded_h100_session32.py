"""Device session 32 on an H100 (tests/fixtures/device/h100-session32): `kvdiag scan D2 --params hsk` with no
tuning flag at all (two batches per worker since session 31), where a bare launch-mode process's time goes,
and on the fork (BeeLlama 775450a68, built there) `kvdiag run D21` and `kvdiag scan D1` over its aborting
hsk=320 cases, one process per case against batches of 16 and 8: the batch failure policy on real aborts.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz  # noqa: E402
from test_recorded_h100_session21 import recorded_attempt  # noqa: E402
from sampled_load import busy_cores, chain_stamps  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session32"
RUNS = FIXTURE / "runs"
D21_FORK = "20261207-235630.708375-0002-D21"
FORK = FIXTURE / "d1-fork"


def scan(path: Path) -> dict:
    return json.loads(read_gz(path))


def d1_scan(name: str) -> dict:
    return scan(FORK / f"scan-{name}.json.gz")


def batch_logs(name: str) -> dict[str, str]:
    """One batched D1 scan's batch logs: name -> the output as the scan read it (stdout, then stderr)."""
    with tarfile.open(FORK / f"logs-{name}.tgz") as tar:
        files = {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    return {n.split(".")[0]: files[n] + files[n.replace("stdout", "stderr")]
            for n in files if n.startswith("batch") and n.endswith(".stdout.log")}


def test_one_h100_its_settings_untouched_and_the_carried_build_passed_abs():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, Default" in env and "2025.3.1" in env
    assert (FIXTURE / "compute-mode.txt").read_text().splitlines() == ["NVIDIA H100 80GB HBM3, Default"]
    abs_run = (FIXTURE / "ggml-carried-abs.txt").read_text()
    assert "4/4 tests passed" in abs_run and "2/2 backends passed" in abs_run
    at = chain_stamps(FIXTURE)
    assert at["carried build runs rc=0"] - at["start"] == 5


def test_scan_d2_with_no_flag_took_79_s_warm_on_this_h100_over_the_goal():
    walls = (FIXTURE / "scan-d2-walls.txt").read_text().split()
    assert walls == ["scan", "1", "rc=1", "command_wall_s=134.4", "scan", "2", "rc=1", "command_wall_s=82.6"]
    first, second = (scan(FIXTURE / f"scan-d2-default-{i}.json.gz") for i in (1, 2))
    assert [first["wall_s"], second["wall_s"]] == [91.842, 79.106]
    # The first call built the launch probe's program (36.8 s, outside the scan's wall); the second reused it.
    assert first["program"]["probe"]["seconds"] == 36.811 and second["program"]["probe"]["reused"] is True
    for data in (first, second):
        assert data["batch_size"] == 113 and data["workers"] == 9     # the new default: two batches per worker
        assert data["phases"]["route"]["processes"] == 9 and data["phases"]["detect"]["processes"] == 18
        assert data["counts"] == {"confirmed": 1333, "not-reproduced": 701, "not-applicable": 902, "skipped": 0,
                                  "inconclusive": 0, "error": 0}
    assert [first["phases"]["route"]["wall_s"], second["phases"]["route"]["wall_s"]] == [32.237, 26.789]
    assert [first["phases"]["detect"]["wall_s"], second["phases"]["detect"]["wall_s"]] == [59.572, 52.29]
    assert {p: c["verdict"] for p, c in first["cases"].items()} == {p: c["verdict"] for p, c in second["cases"].items()}


def test_neither_the_host_nor_the_gpu_was_full_during_the_second_scan():
    data = scan(FIXTURE / "scan-d2-default-2.json.gz")
    at = chain_stamps(FIXTURE)
    start, end = at["scan D2 default 1 rc=1"] + 3, at["scan D2 default 2 rc=1"]
    assert 6.5 < busy_cores(FIXTURE, start, end) < 9.5
    assert data["phases"]["route"]["wall_s"] + data["phases"]["detect"]["wall_s"] <= data["wall_s"]


def test_a_bare_launch_mode_process_spends_more_host_time_than_wall():
    times = (FIXTURE / "route-diag" / "times.txt").read_text().splitlines()
    assert times[1:3] == ["15.519 real 18.225 user 14.014 sys", "^ launch, launches printed"]
    assert times[3:5] == ["14.687 real 18.304 user 13.185 sys", "^ launch, quiet"]
    assert times[7:9] == ["25.534 real 63.049 user 14.145 sys", "^ user's program, test mode"]
    assert times[9] == "545"    # the hsk=128 cases each run printed a status for (OK lines)


def test_run_d21_on_the_fork_is_confirmed_and_judged_again_from_its_log():
    outcome = json.loads((RUNS / D21_FORK / "run.json").read_text())["outcome"]
    assert outcome["verdict"] == "confirmed"
    attempt = recorded_attempt("D21", D21_FORK, RUNS, "initcheck control passed")
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("convert.cu:486" in line for line in attempt.evidence.quoted)
    # The fork prints no src_overlap field; the case regex of c963836 makes it optional.
    command = json.loads((RUNS / D21_FORK / "logs" / "fast-1.cmd.json").read_text())
    assert command["argv"][-1].endswith("(,src_overlap=0)?$")


def test_scan_d1_on_real_aborts_gives_every_case_the_verdict_one_process_per_case_gives():
    scans = {name: d1_scan(name) for name in ("b1", "b16", "b8", "auto")}
    one_each = {p: (c["verdict"], c["reason"]) for p, c in scans["b1"]["cases"].items()}
    assert len(one_each) == 16
    assert sum(v == "confirmed" for v, _ in one_each.values()) == 4
    for name, data in scans.items():
        assert {p: (c["verdict"], c["reason"]) for p, c in data["cases"].items()} == one_each, name
    assert {name: (data["batch_size"], data["processes"]) for name, data in scans.items()} == {
        "b1": (1, 16), "b16": (16, 11), "b8": (8, 10), "auto": (1, 16)}


def test_a_batch_that_died_in_its_first_case_ran_that_case_alone_and_the_rest_in_two_halves():
    batches = d1_scan("b16")["batches"]
    first = batches[0]
    assert (first["cases"], first["judged"], first["again"], first["split"]) == (16, 0, 1, 15)
    assert first["why_again"] == "the process did not finish (killed by SIGABRT (6))"
    assert [(b["cases"], b["judged"], b["again"], b["split"]) for b in batches[1:]] == [
        (7, 0, 1, 6), (8, 0, 1, 7), (3, 3, 0, 0), (3, 3, 0, 0), (4, 4, 0, 0), (3, 2, 1, 0)]
    assert d1_scan("b16")["ran_alone_after_batch"] == 4


def test_each_recorded_batch_log_splits_into_exactly_the_cases_its_record_judged():
    for name in ("b16", "b8"):
        data = d1_scan(name)
        logs = batch_logs(name)
        assert len(logs) == len(data["batches"])
        for record in data["batches"]:
            number = Path(record["log"]).name.split(".")[0]     # the records are in the order batches ended
            text = strip_ansi(logs[number])
            split = split_cases(text, None)
            statuses = [s for s in split.segments if s.case.status is not None]
            assert len(statuses) == record["judged"], (name, number)
            died = record["why_again"] is not None
            assert split.backend_ops.finished is not died, (name, number)
            if died:
                assert "fattn.cu:380: fatal error" in text


def test_slots_stood_idle_after_the_route_phase_and_between_the_detect_waves():
    """Where the second scan's 79 s went beyond its processes (kvdiag.proc.turns, engine.evidence.launch_proof's
    compiled_kernels): the first detect batch started 7.3 s after the last route process ended, and six of the
    nine second-wave batches started 7 s or more after a first-wave batch had ended."""
    from datetime import datetime

    timeline = json.loads((FIXTURE / "scan-d2-default-2-timeline.json").read_text())["commands"]
    spans = {c["name"]: (datetime.fromisoformat(c["started_at"]).timestamp(), c["duration_s"]) for c in timeline}
    route_end = max(start + took for name, (start, took) in spans.items() if name.startswith("route"))
    batches = sorted((start, start + took) for name, (start, took) in spans.items() if name.startswith("batch"))
    assert len(batches) == 18 and sum(name.startswith("route") for name in spans) == 9
    assert round(batches[0][0] - route_end, 1) == 7.3
    first_wave_ends = sorted(end for _, end in batches[:9])
    late = [round(start - free, 1) for (start, _), free in zip(batches[9:], first_wave_ends)]
    assert sum(gap >= 7.0 for gap in late) == 6 and max(late) < 10.5
