"""A scan's `-p` regexes stay under Linux's per-argument limit, and a process that cannot start is the harness's.

On the H200 (tests/fixtures/device/h200-fork-route-e2big) the BeeLlama fork's FLASH_ATTN_EXT case
descriptors, about 400 characters each, made one route process's `-p` regex 194,266 bytes: over
MAX_ARG_STRLEN (131072), so no route process started, and all 4298 cases then ran alone. Here the
stand-in test-backend-ops (tests/scenarios/builds/backend_ops_case_space.py) lists 360 of those
recorded descriptors (230 `nb=1` cases that launch none of the entry's kernels, 106 `nb=32` that
launch it cleanly, 24 `nb=3` that diverge under the fake sanitizer): with one worker, an uncapped
route process for all of them takes a regex of 146,307 bytes, which this machine's kernel refuses
too. The `-p` of every test-mode and launch-mode process is in the stand-in's `invocations.log`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

import kvdiag.engine.scan.batch as scan_batch
from engine_helpers import ALLOWED, REPO
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.scan.cases import deal, enumerate_cases
from kvdiag.engine.scan.batch import MAX_PATTERN_BYTES, batch_regex, cases_per_pattern, pattern_cap
from kvdiag.engine.scan.phases import run_phases
from kvdiag.engine.scan.route import route_batch_size
from kvdiag.records.verdict import Verdict
from kvdiag.errors import CommandNotFound
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.progress import Progress
from kvdiag.report.scan_text import render_scan
from kvdiag.store.runs import RunDir
from test_scan import OP, scan_scenarios

RECORDED = REPO / "tests" / "fixtures" / "device" / "h200-fork-route-e2big"
MAX_ARG_STRLEN = 131072        # Linux: 32 pages, one argument with its NUL


def fork_cases() -> list[str]:
    with gzip.open(RECORDED / "fork-775450a68-fa-cases.txt.gz", "rt", encoding="utf-8") as fh:
        return [line for line in fh.read().splitlines() if line]


CASES = fork_cases()


def nb(case: str) -> str:
    return re.search(r",nb=(\d+),", case).group(1)


NOT_REACHING = [c for c in CASES if nb(c) == "1"]
REACHING = [c for c in CASES if nb(c) in ("3", "32")]
DIVERGING = [c for c in CASES if nb(c) == "3"]


class Said(Progress):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def gate(tool):
    return no_sanitizer_gate(tool) if tool is None else ALLOWED


def stage(kv, root: Path):
    """The stand-in build listing the recorded fork cases, its target with the launch probe's program."""
    import dataclasses

    build = kv.build("backend_ops_case_space")
    (build / "case-space.txt").write_text("\n".join(CASES) + "\n")
    sanitizer = kv.sanitizer()
    target = kv.target(build, sanitizer=sanitizer)
    target = dataclasses.replace(target, probe_program=lambda: ProbeProgram(
        "test-backend-ops-launch", build / "bin" / "test-backend-ops"))
    space = enumerate_cases(target, OP, "hsk=", RunDir(root / "enumerate"))
    assert set(space.supported) == set(CASES)
    return build, target, space, sanitizer


def patterns(build: Path) -> list[str]:
    return (build / "invocations.log").read_text().splitlines()


def sanitized(build: Path) -> list[str]:
    log = build / "sanitized.log"
    return log.read_text().splitlines() if log.exists() else []


def phases_of(entry, target, root: Path, space, name: str, progress: Progress | None = None, **kwargs):
    options = dict(workers=1, devices=(), batch=0, limit=None, not_routed=None, kernel_filter=None,
                   instrument_note="", gate_provider=gate, progress=progress)
    options.update(kwargs)
    return run_phases(entry, target, RunDir(root / name), space=space, **options)


def assert_verdicts(result) -> None:
    verdicts = {p: a.verdict for p, a in result.results.items()}
    assert set(verdicts) == set(CASES)
    assert {p for p, v in verdicts.items() if v is Verdict.CONFIRMED} == set(DIVERGING)
    assert {p for p, v in verdicts.items() if v is Verdict.NOT_APPLICABLE} == set(NOT_REACHING)
    assert {p for p, v in verdicts.items() if v is Verdict.NOT_REPRODUCED} == set(REACHING) - set(DIVERGING)


# ------------------------------------------------------------------------ what the H200 recorded


def test_the_recorded_route_process_passed_one_argument_over_the_kernel_s_limit():
    with gzip.open(RECORDED / "route001.cmd.json.gz", "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    argv = doc["argv"]
    regex = argv[argv.index("-p") + 1]
    assert len(regex.encode()) == 194266 > MAX_ARG_STRLEN
    assert doc["result"]["error"].startswith("cannot execute: OSError: [Errno 7] Argument list too long")
    error = CommandNotFound(f"cannot execute {argv[0]}: {doc['result']['error'].split(': ', 1)[1]}")
    assert error.arguments_too_long
    assert not CommandNotFound(f"program is not executable: {argv[0]} (no execute permission)").arguments_too_long
    # the same cases, dealt as the capped route phase deals them: every process's regex under the cap
    cases = [c.replace("\\", "") for c in regex[2:-2].split("|")]
    assert len(cases) == 478 and all(" n_tail_history_slots=" in c for c in cases)
    size = min(route_batch_size(len(cases), 1), cases_per_pattern(cases))
    batches = deal(list(enumerate(cases)), size)
    assert len(batches) == 3
    assert all(len(batch_regex([c for _, c in b]).encode()) <= MAX_PATTERN_BYTES for b in batches)


def test_the_cap_keeps_a_margin_and_leaves_room_beside_the_environment(monkeypatch):
    assert MAX_PATTERN_BYTES <= MAX_ARG_STRLEN - 16 * 1024
    assert pattern_cap() <= MAX_PATTERN_BYTES
    monkeypatch.setattr(scan_batch.os, "sysconf", lambda name: 128 * 1024)
    monkeypatch.setenv("KVDIAG_TEST_BIG_VARIABLE", "x" * 40 * 1024)
    assert pattern_cap() < 128 * 1024 - 40 * 1024 - scan_batch.ARGV_ROOM
    assert cases_per_pattern(CASES) * 410 < pattern_cap()


# ------------------------------------------------------------------------ the staged scans


def test_a_routed_scan_of_long_cases_routes_every_case_in_capped_processes(tmp_path_factory):
    with scan_scenarios(tmp_path_factory, "scan-cap", "D931") as (root, kv, entry):
        build, target, space, _ = stage(kv, root)
        said = Said()
        result = phases_of(entry, target, root, space, "routed", progress=said)
    route = result.phases["route"]
    assert route["unrouted"] == {} and route["not_started"] == 0 and route["start_failure"] is None
    assert route["reached"] == len(REACHING) and route["not_reached"] == len(NOT_REACHING)
    assert route["processes"] >= 2                       # one worker, but one regex could not hold them all
    assert sorted(sanitized(build)) == sorted(REACHING)   # only the cases that reach the entry's kernels
    lengths = [len(p.encode()) for p in patterns(build)]
    assert len(lengths) == result.processes and max(lengths) <= MAX_PATTERN_BYTES < MAX_ARG_STRLEN
    assert result.ran_alone() == 0 and not any("could not start" in line for line in said.lines)
    assert_verdicts(result)


def test_a_route_process_that_cannot_start_sends_its_cases_to_the_detect_phase_in_batches(tmp_path_factory,
                                                                                          monkeypatch):
    """The cap lifted, the one route process's regex is over the kernel's limit (a real E2BIG here):
    its cases are sanitized in the detect phase's ordinary batches, and the error is said once."""
    monkeypatch.setattr(scan_batch, "MAX_PATTERN_BYTES", 4 << 20)
    with scan_scenarios(tmp_path_factory, "scan-cap-e2big", "D932") as (root, kv, entry):
        build, target, space, _ = stage(kv, root)
        said = Said()
        result = phases_of(entry, target, root, space, "routed", progress=said)
    logs = {Path(a.commands[0]["stdout_path"]).name for a in result.results.values()}
    assert all(name.startswith("batch") for name in logs)                     # not one process per case
    route = result.phases["route"]
    assert route["processes"] == 1 and route["not_started"] == len(CASES)
    assert route["batches"][0]["exit"].startswith("not started: cannot execute ")
    failure = [line for line in said.lines if "could not start" in line]
    assert len(failure) == 1 and "[Errno 7] Argument list too long" in failure[0]
    assert failure[0].startswith("route: 1 route process(es) could not start (cannot execute ")
    assert failure[0].endswith(f"their {len(CASES)} case(s) go to the detect phase unrouted, in batches")
    assert result.ran_alone() == 0
    assert result.phases["detect"]["processes"] == -(-len(CASES) // result.batch_size)
    assert sorted(sanitized(build)) == sorted(CASES)
    assert_verdicts(result)
    assert "route: 1 route process(es) could not start (cannot execute " in render_scan(result, root)


def test_a_sanitized_batch_over_the_limit_is_cut_in_two_batches_not_run_alone(tmp_path_factory, monkeypatch):
    monkeypatch.setattr(scan_batch, "MAX_PATTERN_BYTES", 4 << 20)
    with scan_scenarios(tmp_path_factory, "scan-cap-split", "D933") as (root, kv, entry):
        build, target, space, _ = stage(kv, root)
        result = phases_of(entry, target, root, space, "direct", not_routed="--no-route", batch=len(CASES))
    assert result.processes == 3 and result.ran_alone() == 0
    first = result.batches[0]
    assert first["split"] == len(CASES) and first["judged"] == first["again"] == 0
    assert first["why_again"].startswith("split in two batches: cannot execute ")
    assert "Argument list too long" in first["why_again"]
    assert [b["cases"] for b in result.batches[1:]] == [len(CASES) // 2, len(CASES) - len(CASES) // 2]
    assert_verdicts(result)


def test_a_batch_whose_program_cannot_run_gives_its_cases_the_error_without_a_process_each(tmp_path_factory):
    with scan_scenarios(tmp_path_factory, "scan-cap-noexec", "D934") as (root, kv, entry):
        build, target, space, sanitizer = stage(kv, root)
        os.chmod(sanitizer, 0o644)
        result = phases_of(entry, target, root, space, "direct", not_routed="--no-route", workers=2)
    assert set(result.results) == set(CASES)
    assert {a.verdict for a in result.results.values()} == {Verdict.SKIPPED}
    reason = next(iter(result.results.values())).reason
    assert reason.startswith("not run: its batch's process could not start: program is not executable: ")
    assert result.processes == len(result.batches) == -(-len(CASES) // result.batch_size)
    assert result.ran_alone() == 0 and not (build / "invocations.log").exists()
