"""#15 on the H200: BeeLlama 775450a68's facts, D10 through CTest, and the case that killed a walk.

The recordings are in tests/fixtures/device/h200-fork-llama-session4 (its README.md says
which call and command made each file). `forkfacts-*.log` are what kvdiag printed there;
`call2-*` are the logs of those runs' own folders. Each walk is judged again here from its
logs, attributed from its own `test-backend-ops support` listing, and its lone case judged
by the same judge: what kvdiag printed on the device must follow from them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine_helpers import read_recorded
from test_recorded_device_runs import recorded_result

from kvdiag.engine.run.attribution import (
    IMPRECISE,
    Attribution,
    candidate_cases,
    needs_attribution,
    own_output,
    reproduces,
)
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.observe import observe
from kvdiag.records.verdict import Attempt, Outcome, Verdict
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.registry.loader import load_registry
from kvdiag.report.run_text import render_outcome

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "fixtures" / "device" / "h200-fork-llama-session4"
D1_CASE = ("hsk=320,hsv=256,nh=1,nr23=[32,1],kv=512,nb=1,mask=1,sinks=1,max_bias=0.000000,"
           "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]")
D2_CASE = ("hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,"
           "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]")
SIGABRT = 6


@pytest.fixture(scope="module")
def registry():
    return load_registry(REPO / "registry")


def read(name: str) -> str:
    """A recorded file by its name, gzipped or not."""
    plain = DEVICE / name
    return read_recorded(plain if plain.exists() else DEVICE / f"{name}.gz")


def recorded_run(entry_id: str) -> dict:
    return json.loads(read(f"call2-{entry_id}.run.json"))


def walk_command(entry_id: str) -> dict:
    """The recorded run's first command as run.json keeps it (argv, returncode, signal)."""
    return recorded_run(entry_id)["outcome"]["attempts"][0]["commands"][0]


def judged(entry, tmp_path: Path, prefix: str, *, returncode: int | None = None, signal: int | None = None,
           sanitizer: bool = False) -> Attempt:
    """One recorded process (its stdout, stderr, combined and sanitizer logs) through the judge."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    result = recorded_result(tmp_path, read(f"{prefix}.stdout.log"), read(f"{prefix}.stderr.log"),
                             read(f"{prefix}.combined.log"), returncode=returncode, signal=signal)
    logs = []
    if sanitizer:
        logs = [tmp_path / "logs" / "recorded.sanitizer.log"]
        logs[0].write_text(read(f"{prefix}.sanitizer.log"), encoding="utf-8")
    step = entry.default_step
    return judge_attempt(entry, observe(step, [result], logs), no_sanitizer_gate(step.sanitizer), 1, 1.0)


def listing(prefix: str) -> tuple[list[str], list[str]]:
    """The step's cases as `test-backend-ops support` listed them: all, and the supported ones."""
    cases = parse_backend_ops(read(f"{prefix}-enumerate.stdout.log")).cases
    return [c.params for c in cases], [c.params for c in cases if c.status == "SUPPORTED"]


def printed_block(log: str, header: str) -> list[str]:
    """The `| …` lines under a header of what kvdiag printed (`matched lines:`, `its own output …`)."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    out = []
    for line in lines[start + 1:]:
        if not line.lstrip().startswith("| "):
            break
        out.append(line.lstrip()[2:])
    return out


def with_case(params: str, full: str) -> bool:
    """test-backend-ops on the fork prints extra fields after the registry's parameter string."""
    return full == params or full.startswith(params + " ")


# ------------------------------------------------------------------ registry verify

SUMMARY = re.compile(r"^(?P<entries>\d+) entries, (?P<facts>\d+) facts checked, (?P<mismatches>\d+) mismatch\(es\)$")
MISMATCH = re.compile(r"^D\d+\.md: \S+: ")


def _summary(log: str) -> re.Match:
    found = [m for m in map(SUMMARY.match, log.splitlines()) if m]
    assert len(found) == 1, log
    return found[0]


def test_verify_on_the_fork_checked_56_facts_with_no_mismatch():
    log = read("forkfacts-verify.log")
    assert "kvdiag registry verify --source /tmp/kv/fork --build /tmp/kv/fork/build" in log
    summary = _summary(log)
    assert (summary["facts"], summary["mismatches"]) == ("56", "0")
    assert not [line for line in log.splitlines() if MISMATCH.match(line)]
    assert "exit 0" in log.splitlines()[-1]


def test_verify_on_ggml_holds_the_fork_entries_as_another_trees():
    log = read("forkfacts-verify-ggml.log")
    summary = _summary(log)
    assert (summary["facts"], summary["mismatches"]) == ("34", "0")
    other = {line.split(":", 1)[0] for line in log.splitlines() if "not this tree's defect" in line}
    assert other == {"D3.md", "D4.md", "D5.md", "D7.md", "D9.md", "D10.md"}
    assert not [line for line in log.splitlines() if MISMATCH.match(line) and "not this tree" not in line]


def test_the_recorded_summary_is_the_one_the_command_prints(tmp_path, capsys):
    """So the two tests above read the line `kvdiag registry verify` writes today."""
    from kvdiag.cli import main

    (tmp_path / "tree").mkdir()
    code = main(["--registry", str(REPO / "registry"), "registry", "verify", "--source", str(tmp_path / "tree")])
    captured = capsys.readouterr()
    summary = _summary(captured.out + captured.err)        # an empty tree: every ggml fact a mismatch
    assert int(summary["mismatches"]) > 0 and code == 65 and int(summary["entries"]) >= 13


# ------------------------------------------------------------------ D10 through CTest

def test_d10_on_the_fork_is_confirmed_by_ctest_with_the_lines_kvdiag_printed(registry, tmp_path):
    d10 = registry.get("D10")
    command = walk_command("D10")
    assert command["argv"][:2] == ["ctest", "--test-dir"] and command["returncode"] == 8
    attempt = judged(d10, tmp_path, "call2-D10-ctest", returncode=command["returncode"])
    assert attempt.verdict is Verdict.CONFIRMED
    printed = printed_block(read("forkfacts-D10.log"), "matched lines:")
    assert [q.strip() for q in attempt.evidence.quoted] == [p.strip() for p in printed]
    assert any(re.fullmatch(r"18 - test-upstream-merge-keepers-static \(Failed\)\s+main", q.strip())
               for q in attempt.evidence.quoted)
    assert "AssertionError: AGENTS.md does not describe the v0.4.0 CUDA policy" in attempt.evidence.quoted
    assert "D10 CONFIRMED" in read("forkfacts-D10.log")
    assert recorded_run("D10")["outcome"]["verdict"] == "confirmed"


# ------------------------------------------------------------------ D1: a walk that aborted after a case

@pytest.fixture(scope="module")
def d1_walk(registry, tmp_path_factory) -> Attempt:
    command = walk_command("D1")
    assert (command["argv"][-2:], command["returncode"], command["signal"]) == (["-p", "hsk=320"], None, SIGABRT)
    return judged(registry.get("D1"), tmp_path_factory.mktemp("d1-walk"), "call2-D1-walk", signal=command["signal"])


@pytest.fixture(scope="module")
def d1_alone(registry, tmp_path_factory) -> Attempt:
    return judged(registry.get("D1"), tmp_path_factory.mktemp("d1-case"), "call2-D1-case001", signal=SIGABRT)


def test_d1_walk_died_after_a_case_that_is_not_the_culprit(registry, d1_walk):
    assert d1_walk.verdict is Verdict.CONFIRMED and d1_walk.evidence.exit == "killed by SIGABRT (6)"
    assert needs_attribution(registry.get("D1").default_step, d1_walk)
    last = d1_walk.evidence.last_finished_case
    assert d1_walk.evidence.running_case.startswith(IMPRECISE) and last in d1_walk.evidence.running_case
    assert "nr23=[4,1],kv=512,nb=75" in last and "permute=[0,2,1,3]" in last
    assert not with_case(D1_CASE, last)        # the last case that finished is not the one that aborts


def test_d1_attribution_starts_with_the_case_that_reproduced_alone(d1_walk):
    listed, supported = listing("call2-D1")
    assert (len(listed), len(supported)) == (256, 16)
    candidates = candidate_cases(listed, supported, d1_walk.evidence.last_finished_case)
    assert len(candidates) == 16 and with_case(D1_CASE, candidates[0])
    found = recorded_run("D1")["outcome"]["extra"]["case"]
    assert found["params"] == candidates[0] and found["candidates"] == len(candidates)
    assert found["processes"] == 1 and found["tried"][0]["verdict"] == "confirmed"


def test_d1_lone_case_is_confirmed_by_the_same_judge_and_quoted_first(registry, d1_walk, d1_alone, tmp_path):
    assert d1_alone.verdict is Verdict.CONFIRMED and reproduces(d1_walk, d1_alone)
    assert d1_alone.evidence.exit == d1_walk.evidence.exit
    assert "/tmp/kv/fork/ggml/src/ggml-cuda/fattn.cu:380: fatal error" in d1_alone.evidence.quoted
    log = tmp_path / "case.combined.log"
    log.write_text(read("call2-D1-case001.combined.log"))
    output = own_output(d1_alone, log)
    assert output[0] == "/tmp/kv/fork/ggml/src/ggml-cuda/fattn.cu:380: fatal error"
    assert "fatal error" not in output                       # the bare match, beside the line that holds it
    assert any("(ggml_abort+" in line for line in output) and not any("(+0x" in line for line in output)
    printed = read("forkfacts-D1.log")
    assert f"case: FLASH_ATTN_EXT({D1_CASE}" in printed and "1 process(es), 1.8 s on top of the run" in printed


def test_d1_cost_on_top_of_the_run():
    run = recorded_run("D1")
    found = run["outcome"]["extra"]["case"]
    assert found["wall_s"] == pytest.approx(1.8, abs=0.05)
    assert found["case"] == f"FLASH_ATTN_EXT({found['params']})" and with_case(D1_CASE, found["params"])


# ------------------------------------------------------------------ D2: the sanitizer ended the walk, none printed

@pytest.fixture(scope="module")
def d2_walk(registry, tmp_path_factory) -> Attempt:
    command = walk_command("D2")
    assert command["argv"][1:3] == ["--tool", "synccheck"] and command["returncode"] == 99
    return judged(registry.get("D2"), tmp_path_factory.mktemp("d2-walk"), "call2-D2-walk",
                  returncode=command["returncode"], sanitizer=True)


@pytest.fixture(scope="module")
def d2_alone(registry, tmp_path_factory) -> Attempt:
    return judged(registry.get("D2"), tmp_path_factory.mktemp("d2-case"), "call2-D2-case001", returncode=99,
                  sanitizer=True)


def test_d2_walk_printed_no_case_and_needs_attribution(registry, d2_walk):
    assert d2_walk.verdict is Verdict.CONFIRMED
    assert d2_walk.evidence.cases_matched == 0 and d2_walk.evidence.exit == "exit 99"
    assert d2_walk.evidence.error_count == 2048
    assert needs_attribution(registry.get("D2").default_step, d2_walk)
    listed, supported = listing("call2-D2")
    candidates = candidate_cases(listed, supported, d2_walk.evidence.last_finished_case)
    assert len(candidates) == 1 and with_case(D2_CASE, candidates[0])


def test_d2_lone_case_is_confirmed_and_its_findings_come_before_its_abort(registry, d2_walk, d2_alone, tmp_path):
    assert d2_alone.verdict is Verdict.CONFIRMED and reproduces(d2_walk, d2_alone)
    assert d2_alone.evidence.error_count == 2048
    assert [s["site"] for s in d2_alone.evidence.sites] == ["fattn-mma-f16.cuh:1607"]
    log = tmp_path / "case.combined.log"
    log.write_text(read("call2-D2-case001.combined.log"))
    output = list(own_output(d2_alone, log))
    assert output[0] == "Barrier error detected. Divergent thread(s) in block."
    site = next(i for i, line in enumerate(output) if line.startswith("at ") and "fattn-mma-f16.cuh:1607" in line)
    cuda = output.index("CUDA error: unspecified launch failure")
    abort = output.index("/tmp/kv/fork/ggml/src/ggml-cuda/ggml-cuda.cu:109: CUDA error")
    assert site < cuda < abort
    assert output[cuda + 2].strip() == "cudaFuncGetAttributes(&attr, kernel)"
    assert any("launch_fattnILi256ELi4ELi4E" in line for line in output[abort:])
    assert len(output) <= 15


def test_d2_verdict_text_quotes_the_findings_then_the_abort(registry, d2_walk, d2_alone, tmp_path):
    """The verdict as `kvdiag run D2` prints it, rebuilt from the recorded logs with today's code."""
    d2 = registry.get("D2")
    log = tmp_path / "attribute-case001.combined.log"
    log.write_text(read("call2-D2-case001.combined.log"))
    recorded = recorded_run("D2")["outcome"]["extra"]["case"]
    found = Attribution(op="FLASH_ATTN_EXT", case=recorded["params"], attempt=d2_alone, tried=recorded["tried"],
                        candidates=1, wall_s=recorded["wall_s"], log=str(log),
                        sanitizer_log=str(tmp_path / "attribute-case001.sanitizer.log"),
                        output=own_output(d2_alone, log)).to_dict()
    outcome = Outcome("D2", Verdict.CONFIRMED, "recorded", (d2_walk,), (), "fast", 5.8, {"case": found})
    text = render_outcome(outcome, d2, tmp_path)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("its own output ("))
    assert "; sanitizer: " in lines[header]
    quoted = printed_block(text, lines[header].strip())
    assert quoted[0] == "Barrier error detected. Divergent thread(s) in block."
    assert quoted.index("CUDA error: unspecified launch failure") > 1
    assert f"case: FLASH_ATTN_EXT({recorded['params']}) (reproduced alone: 1 process(es), 3.2 s" in text
    # what the device printed then: the tail of the backtrace only (fixed since)
    then = printed_block(read("forkfacts-D2.log"), "its own output (")
    assert "Barrier error detected. Divergent thread(s) in block." not in then


def test_d2_cost_on_top_of_the_run():
    found = recorded_run("D2")["outcome"]["extra"]["case"]
    assert found["wall_s"] == pytest.approx(3.2, abs=0.05) and found["processes"] == 1
    assert found["error_count"] == 2048 and found["exit"] == "exit 99"
    printed = read("forkfacts-D2.log")
    assert f"case: FLASH_ATTN_EXT({D2_CASE}" in printed and "1 process(es), 3.2 s on top of the run" in printed
