"""A registry entry of kind "server" driven through run_server_attempt, observe() and the judge.

This is the path execute.py takes for a server step: render the step's argv,
run the attempt, read its logs back with ``observe``, judge with the entry's
signature, and aggregate k/N over the runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.evidence.observe import observe
from kvdiag.engine.verdict.planning import render_step, template_context
from kvdiag.records.verdict import Verdict, aggregate
from kvdiag.registry.loader import load_registry
from kvdiag.server import completion_requests, run_server_attempt
from server_helpers import pid_gone, pids_in, standin_executable

ALLOWED = Gate(True, "no sanitizer involved (test gate)")
REFUSED = Gate(False, "the detector's control has not passed (test gate)")

ENTRY = '''```toml
[defect]
id = "D900"
title = "A server that aborts mid-generation"
summary = "Scenario entry of tests/server: a stand-in llama-server staged to abort like D3."
owner = "fork"
status = "open"
severity = "low"
reported = "2026-11-29"
modified = "2026-11-29"

[location]
component = "tests/server"

[requires]
binaries = ["llama-server"]

[[repro]]
name = "server"
kind = "server"
description = "Start the stand-in, wait for /health, ask for a completion."
argv = ["{{ bin['llama-server'] }}", "-m", "tiny.gguf", "-fa", "on", "--seed", "{{ seed }}",
        "--lifetime", "20", "--state", "{{ scratch }}/starts"]
timeout = 20
runs = 3
vars = { prompt = "the lighthouse keeper", n_predict = 12, seed = 42, requests = 1 }

[[signature]]
type = "abort"
kind = "cuda-error"
message = "illegal memory access"

[[signature]]
type = "output"
stream = "combined"
pattern = 'in function ggml_backend_cuda_synchronize\\b'
```

# D900

A scenario entry: it exists only for the server tests.
'''


@pytest.fixture
def entry(tmp_path: Path):
    registry_dir = tmp_path / "registry"
    registry_dir.mkdir()
    (registry_dir / "D900.md").write_text(ENTRY)
    registry = load_registry(registry_dir)
    assert not registry.problems, [str(p) for p in registry.problems]
    return registry.get("D900")


def run_attempts(entry, tmp_path: Path, standin_name: str, gate: Gate = ALLOWED, runs: int = 1):
    """What execute.py does for a server step, ``runs`` times: render, attempt, observe, judge."""
    step = entry.default_step
    exe = standin_executable(tmp_path / "build" / "bin", standin_name)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    context = template_context(entry, step, binaries={"llama-server": exe}, build_dir=tmp_path / "build",
                               source_dir=None, scratch=scratch, environ={})
    planned = render_step(step, context)
    attempts, results = [], []
    for index in range(1, runs + 1):
        result, outcome = run_server_attempt(step, planned.commands[0], planned.env, tmp_path / "logs",
                                             f"{step.name}-{index}", requests=completion_requests(step.vars),
                                             health_timeout=8.0, request_timeout=8.0)
        assert result.server is outcome
        obs = observe(step, [result], [])
        attempts.append(judge_attempt(entry, obs, gate, index, result.duration_s, str(tmp_path / "logs")))
        results.append(result)
    return attempts, results


def test_a_server_abort_with_the_signature_is_confirmed(entry, tmp_path):
    (attempt,), (result,) = run_attempts(entry, tmp_path, "crashes_mid_request")
    assert result.server.kind == "connection-dropped"
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert "cuda-error: CUDA error: an illegal memory access was encountered" in attempt.reason
    assert attempt.evidence.aborts[0]["kind"] == "cuda-error"
    assert any("ggml_backend_cuda_synchronize" in q for q in attempt.evidence.quoted)
    assert "SIGABRT" in attempt.evidence.exit
    assert attempt.commands[0]["kind"] == "server"
    assert attempt.commands[0]["server"]["outcome"] == "connection-dropped"


def test_a_completed_server_run_is_not_reproduced_when_the_gate_allows(entry, tmp_path):
    (attempt,), (result,) = run_attempts(entry, tmp_path, "completes_with_draft_stats")
    assert result.server.kind == "completed"
    assert attempt.verdict is Verdict.NOT_REPRODUCED, attempt.reason
    assert "the server answered 1/1 request(s)" in attempt.reason
    # the step's vars reached the request body
    assert '"n_predict": 12' in result.stderr_text() and '"seed": 42' in result.stderr_text()
    # and the rendered argv reached the server, with kvdiag's address appended
    assert result.argv[1:7] == ("-m", "tiny.gguf", "-fa", "on", "--seed", "42")
    assert attempt.commands[0]["server"]["requests"][0]["draft"]["draft_n"] == 12


def test_a_completed_server_run_is_inconclusive_when_the_gate_refuses(entry, tmp_path):
    (attempt,), _ = run_attempts(entry, tmp_path, "completes_with_draft_stats", gate=REFUSED)
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert "control has not passed" in attempt.reason


def test_a_hung_server_is_inconclusive_as_a_timeout(entry, tmp_path):
    step = entry.default_step
    exe = standin_executable(tmp_path / "bin", "hangs_on_request")
    result, _ = run_server_attempt(step, [str(exe), "--lifetime", "20"], None, tmp_path / "logs", "hang",
                                   health_timeout=8.0, request_timeout=0.8)
    attempt = judge_attempt(entry, observe(step, [result], []), ALLOWED, 1, result.duration_s)
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert "timed out" in attempt.reason and "no answer within 0.8 s" in attempt.reason


def test_a_server_that_dies_another_way_is_inconclusive_showing_how(entry, tmp_path):
    (attempt,), (result,) = run_attempts(entry, tmp_path, "exits_while_loading")
    assert result.server.kind == "server-exited"
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert "a different failure" in attempt.reason and "exit 1" in attempt.reason


def test_flaky_server_runs_give_k_of_n(entry, tmp_path):
    attempts, results = run_attempts(entry, tmp_path, "crashes_on_second_start", runs=3)
    assert [r.server.kind for r in results] == ["completed", "connection-dropped", "completed"]
    assert [a.verdict for a in attempts] == [Verdict.NOT_REPRODUCED, Verdict.CONFIRMED, Verdict.NOT_REPRODUCED]
    verdict, reason = aggregate(attempts)
    assert verdict is Verdict.CONFIRMED and reason.startswith("1/3 runs matched the signature")
    # each run kept its own logs, and no stand-in outlived its run
    for index, result in enumerate(results, 1):
        assert result.combined_path.name == f"server-{index}.combined.log"
        assert all(pid_gone(pid) for pid in pids_in(result.stdout_text()).values())


def test_the_entry_requests_come_from_the_step_vars(entry):
    (request,) = completion_requests(entry.default_step.vars)
    assert request.body() == {"prompt": "the lighthouse keeper", "n_predict": 12, "temperature": 0.0, "seed": 42,
                              "cache_prompt": False}
