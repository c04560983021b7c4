"""`kvdiag run D5` end to end: the real entry, both arms served by one stand-in llama-server that
prints the recorded compute buffer lines of its cache type (tests/fixtures/d5-compute-buffers).

The arm runs once, after the kvarn5 server, the first time the relative signature asks for its
figure; the verdict, the run's text and `kvdiag report D5` quote both lines and the ratio.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine_helpers import FIXTURES
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry
from kvdiag.report.run_text import render_outcome
from kvdiag.report.upstream import upstream_report
from server.server_helpers import standin_executable  # noqa: E402 (tests/server, a namespace package)

BUFFERS = FIXTURES / "d5-compute-buffers"


@pytest.fixture
def d5_run(kv, tmp_path, monkeypatch):
    """Run the real D5 against a build whose llama-server prints ``folder``'s lines."""
    def run(folder: Path):
        build = kv.build(None, cache_extra={"GGML_CUDA_KVARN:BOOL": "OFF"})
        standin_executable(build / "bin", "prints_compute_buffers")
        monkeypatch.setenv("STANDIN_BUFFERS", str(folder))
        monkeypatch.setenv("LLAMA_KV_MODEL", str(tmp_path / "tiny.gguf"))
        entry = load_registry().get("D5")
        return entry, kv.run(entry, kv.target(build, sanitizer=None))
    return run


def test_the_synthesized_models_run_confirms_quoting_both_arms(d5_run):
    entry, r = d5_run(BUFFERS / "h200-synth")
    o = r.outcome
    assert o.verdict is Verdict.CONFIRMED, o.reason
    assert o.reason == ("1/1 runs matched the signature: kvarn5: 956.40 MiB ('sched_reserve:  CUDA_Host compute "
                        "buffer size =   956.40 MiB') against q8_0-control: 9.79 MiB ('sched_reserve:  CUDA_Host "
                        "compute buffer size =     9.79 MiB'): 97.7× (at least the 50× that confirms)")
    # one server per arm, the arm once; its lines are in run.json beside the verdict
    assert {"kvarn5-1.combined.log", "q8_0-control-1.combined.log"} <= r.log_names()
    comparison = r.run_json["outcome"]["extra"]["comparison"]
    assert comparison["step"] == "q8_0-control" and comparison["missing"] == []
    assert comparison["seen"] == ["'sched_reserve:  CUDA_Host compute buffer size =     9.79 MiB'"]
    text = render_outcome(o, entry, r.run_dir.path)
    assert "97.7×" in text
    assert "    | sched_reserve:  CUDA_Host compute buffer size =   956.40 MiB" in text
    assert "    | sched_reserve:  CUDA_Host compute buffer size =     9.79 MiB" in text
    report = upstream_report(entry, r.run_dir)
    assert "**Verdict: confirmed**" in report and "97.7×" in report
    assert ("sched_reserve:  CUDA_Host compute buffer size =   956.40 MiB\n"
            "sched_reserve:  CUDA_Host compute buffer size =     9.79 MiB") in report


def test_the_seeds_figures_give_the_same_answer(d5_run):
    _, r = d5_run(BUFFERS / "seed-27b")
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert "2195.90 MiB" in r.outcome.reason and "20.28 MiB" in r.outcome.reason and "108.3×" in r.outcome.reason


def test_an_arm_that_fails_at_start_up_leaves_the_verdict_inconclusive_naming_it(d5_run, tmp_path):
    folder = tmp_path / "arm-fails"
    shutil.copytree(BUFFERS / "h200-synth", folder)
    (folder / "q8_0.exit").write_text("1\n")
    _, r = d5_run(folder)
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason.startswith("the signature could not be judged: the comparison arm q8_0-control failed: "
                                       "the server exited before it was ready")
    assert "q8_0-control-1.combined.log" in r.log_names()


def test_an_arm_that_prints_no_compute_buffer_is_inconclusive_too(d5_run, tmp_path):
    folder = tmp_path / "arm-silent"
    folder.mkdir()
    shutil.copy(BUFFERS / "h200-synth" / "kvarn5.log", folder)
    _, r = d5_run(folder)
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert "the comparison arm q8_0-control ended inconclusive: the path did not run as expected" in r.outcome.reason
