"""The pieces of a server attempt that need no server: requests from vars, replies, draft counters."""

from __future__ import annotations

import json

import pytest

from kvdiag.server.client import CompletionRequest, Reply, completion_requests, get_health
from kvdiag.server.lifecycle import free_port, with_address
from kvdiag.server.outcome import ServerOutcome, cuda_error_lines, draft_stats


def test_requests_default_to_one_greedy_uncached_completion():
    (request,) = completion_requests({})
    body = request.body()
    assert body["temperature"] == 0.0 and body["cache_prompt"] is False and body["seed"] == 1234
    assert body["n_predict"] == 128 and body["prompt"]


def test_requests_follow_the_vars_and_pass_known_extras_only():
    requests = completion_requests({"prompt": "p", "n_predict": "900", "seed": 7, "requests": 3,
                                    "ignore_eos": True, "params": "not a request key"})
    assert len(requests) == 3
    assert requests[0].body() == {"prompt": "p", "n_predict": 900, "temperature": 0.0, "seed": 7,
                                  "cache_prompt": False, "ignore_eos": True}


def test_zero_requests_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        completion_requests({"requests": 0})


def test_the_address_is_appended_so_it_wins_and_a_sanitizer_port_is_untouched():
    argv = ("compute-sanitizer", "--port", "49152", "llama-server", "-m", "m.gguf")
    assert with_address(argv, "127.0.0.1", 8080) == (*argv, "--host", "127.0.0.1", "--port", "8080")


def test_draft_counters_are_read_from_timings_and_the_top_level():
    assert draft_stats({"timings": {"draft_n": 40, "draft_n_accepted": 30, "predicted_n": 90}}) == {
        "draft_n": 40, "draft_n_accepted": 30, "acceptance": 0.75}
    assert draft_stats({"draft_n": 10, "draft_n_accepted": 1, "timings": {}}) == {
        "draft_n": 10, "draft_n_accepted": 1, "acceptance": 0.1}
    assert draft_stats({"timings": {"predicted_n": 9}}) == {}
    assert draft_stats({"draft_n": 0, "draft_n_accepted": 0}) == {"draft_n": 0, "draft_n_accepted": 0}


def test_llama_server_error_objects_are_read_for_the_message():
    reply = Reply(503, json.dumps({"error": {"code": 503, "message": "Loading model"}}).encode())
    assert reply.error_message() == "Loading model"
    assert Reply(500, b"plain text failure").error_message() == "plain text failure"
    assert Reply(500, b"").error_message() == "(empty body)"


def test_nothing_listening_is_a_refused_reply_not_an_exception():
    reply = get_health(free_port(), timeout=1.0)
    assert reply.status is None and reply.error_kind == "refused"


def test_cuda_error_lines_are_collected_once_each_in_order():
    text = ("x\nCUDA error: an illegal memory access was encountered\n  current device: 0\n"
            "CUDA error: unspecified launch failure\nCUDA error: an illegal memory access was encountered\n")
    assert cuda_error_lines(text) == ("CUDA error: an illegal memory access was encountered",
                                      "CUDA error: unspecified launch failure")


@pytest.mark.parametrize("kind, flag", [("completed", "ok"), ("hang", "timed_out"), ("health-timeout", "timed_out"),
                                        ("interrupted", "interrupted")])
def test_each_outcome_sets_the_flag_the_judge_reads(kind, flag, tmp_path):
    from kvdiag.server.outcome import ServerResult

    result = ServerResult(argv=("x",), returncode=0, signal=None, duration_s=1.0, log_dir=tmp_path,
                          stdout_path=tmp_path / "a", stderr_path=tmp_path / "b", combined_path=tmp_path / "c",
                          started_at="", server=ServerOutcome(kind=kind, detail="d", requests_planned=1))
    flags = {"ok": result.ok, "timed_out": result.timed_out, "interrupted": result.interrupted}
    assert [k for k, v in flags.items() if v] == [flag]
    assert result.stdout_text() == "" and json.dumps(result.to_dict())


def test_completion_request_is_frozen():
    request = CompletionRequest(prompt="x")
    with pytest.raises(AttributeError):
        request.prompt = "y"  # type: ignore[misc]
