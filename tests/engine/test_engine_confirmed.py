"""Verdict path 1 (confirmed) through scenario builds: D2 as recorded, without -lineinfo,
flaky k-of-N, through the CLI, and each other signature type on a small entry."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine_helpers import (
    BARRIER_LINE, D2_CASE, D2_INSTANTIATION, REFUSED, d2_like, fake_gpu,
)
from kvdiag.cli import main
from kvdiag.records.verdict import Verdict
from kvdiag.store.runs import id_label
from kvdiag.workspace.build import Staleness


def test_d2_confirmed_quotes_the_recorded_barrier_finding(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges"))
    o, ev = r.outcome, r.evidence

    assert o.verdict is Verdict.CONFIRMED and o.verdict.exit_code == 1
    assert "barrier-divergence at fattn-mma-f16.cuh:1538" in o.reason
    assert (o.k, o.n) == (1, 1)
    assert any(BARRIER_LINE in line for line in ev.quoted)
    assert any("in fattn-mma-f16.cuh:1538" in line for line in ev.quoted)
    assert ev.error_count == 2048
    assert ev.sites[0]["site"] == "fattn-mma-f16.cuh:1538"
    assert ev.sites[0]["kind"] == "barrier-divergence"
    assert ev.sites[0]["count"] == 20            # printed (--print-limit 20 in the recording)
    assert ev.instantiations[0] == D2_INSTANTIATION
    # the process died after the finding, as recorded; that is evidence, not a different failure
    assert any(a["message"] == "CUDA error: unspecified launch failure" for a in ev.aborts)
    assert ev.matched and not ev.unmatched
    # a confirmation needs no control: the (possibly costly) gate is not consulted
    assert r.gate_calls == []
    # -lineinfo build: no warning about missing file:line
    assert not any("file:line" in w for w in o.warnings)


def test_d2_confirmed_run_directory(kv, d2):
    target = kv.target_for("backend_ops_d2_diverges")
    sanitizer = target.sanitizer
    r = kv.run(d2, target)

    data = r.run_json
    assert data["status"] == "finished" and data["entry"] == "D2" and data["step"] == "fast"
    assert data["outcome"]["verdict"] == "confirmed"
    assert data["outcome"]["attempts"][0]["evidence"]["error_count"] == 2048
    assert data["target"]["build"]["lineinfo"] is True
    assert data["target"]["environment"]["gpu"]["devices"][0]["name"] == "NVIDIA H200"
    assert {"fast-1.cmd.json", "fast-1.combined.log", "fast-1.stdout.log", "fast-1.stderr.log",
            "fast-1.sanitizer.log"} <= r.log_names()
    cmd = json.loads(r.log("fast-1.cmd.json"))
    assert cmd["argv"][:3] == [str(sanitizer), "--tool", "synccheck"]
    assert cmd["argv"][cmd["argv"].index("-p") + 1] == d2.step("fast").vars["params"]
    assert "ERROR SUMMARY: 2048 errors" in r.log("fast-1.sanitizer.log")
    combined = r.log("fast-1.combined.log")
    assert "Testing 2 devices" in combined and "ggml-cuda.cu:106: CUDA error" in combined
    commands = data["outcome"]["attempts"][0]["commands"]
    assert commands[0]["combined_path"] == "logs/fast-1.combined.log"


def test_d2_numeric_step_is_informational(kv, d2):
    """D2's numeric step has no signature: running it for a verdict is a usage error."""
    from kvdiag.errors import UsageError

    target = kv.target_for("backend_ops_d2_diverges")
    with pytest.raises(UsageError, match="no signature"):
        kv.run(d2, target, step="numeric")


def test_without_lineinfo_still_confirmed_with_a_warning(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges", lineinfo=False))
    o, ev = r.outcome, r.evidence

    assert o.verdict is Verdict.CONFIRMED
    assert "no file:line in the output" in o.reason
    assert ev.sites[0]["file"] is None and ev.sites[0]["site"] == "+0x15b50"
    assert ev.error_count == 2048
    assert ev.instantiations[0] == D2_INSTANTIATION
    assert "sites lack file:line (no -lineinfo): confirmed on kind and kernel only" in o.warnings
    assert any("the build lacks -lineinfo" in w for w in o.warnings)
    assert "fattn-mma-f16.cuh:1538" not in r.log("fast-1.sanitizer.log")


def test_findings_confirm_even_when_the_tool_died_before_its_summary(kv, d2):
    """Rule 1 comes first: printed findings are evidence; only silence needs the summary."""
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges", sanitizer="no-summary"))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.evidence.error_count is None          # the tool never counted
    assert r.evidence.sites[0]["site"] == "fattn-mma-f16.cuh:1538"


def test_flaky_k_of_n(kv):
    entry = kv.entry("D901", d2_like(runs=3))
    build = kv.build("backend_ops_flaky")
    r = kv.run(entry, kv.target(build, sanitizer=kv.sanitizer()))
    o = r.outcome

    assert o.verdict is Verdict.CONFIRMED
    assert (o.k, o.n, o.k_of_n) == (2, 3, "2/3")
    assert o.reason.startswith("2/3 runs matched the signature")
    assert [a.verdict for a in o.attempts] == [Verdict.CONFIRMED, Verdict.NOT_REPRODUCED, Verdict.CONFIRMED]
    assert [a.index for a in o.attempts] == [1, 2, 3]
    assert [a.evidence.error_count for a in o.attempts] == [2048, 0, 2048]
    assert o.attempts[1].evidence.cases_executed == 1
    assert (build / "invocations").read_text() == "3"
    # only the clean attempt needed the control
    assert r.gate_calls == ["synccheck"]
    data = r.run_json["outcome"]
    assert (data["k"], data["n"]) == (2, 3)
    assert [a["evidence"]["error_count"] for a in data["attempts"]] == [2048, 0, 2048]
    for i in (1, 2, 3):
        assert f"fast-{i}.sanitizer.log" in r.log_names()
    assert "ERROR SUMMARY: 0 errors" in r.log("fast-2.sanitizer.log")


def test_flaky_runs_override_and_failed_control(kv, d2):
    """--runs on the real D2; a failed control makes the clean run inconclusive, not the verdict."""
    build = kv.build("backend_ops_flaky")
    r = kv.run(d2, kv.target(build, sanitizer=kv.sanitizer()), runs=2, gate=REFUSED)
    o = r.outcome
    assert o.verdict is Verdict.CONFIRMED and o.k_of_n == "1/2"
    assert o.attempts[1].verdict is Verdict.INCONCLUSIVE
    assert "positive control was not detected" in o.attempts[1].reason


# ------------------------------------------------------------------------- other signature types

def test_abort_signature(kv):
    entry = kv.entry("D902", d2_like(sanitizer=False, signature='''
        [[signature]]
        type = "abort"
        kind = "cuda-error"
        message = "out of memory"
        '''))
    r = kv.run(entry, kv.target_for("backend_ops_other_abort", sanitizer=None))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.outcome.reason.endswith("cuda-error: CUDA error: out of memory")
    assert "CUDA error: out of memory" in r.evidence.quoted
    assert r.evidence.running_case == f"FLASH_ATTN_EXT({D2_CASE})"


def test_case_signature(kv):
    entry = kv.entry("D903", d2_like(sanitizer=False, signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        metric = "ERR"
        min_value = 0.5
        '''))
    r = kv.run(entry, kv.target_for("backend_ops_case_fail", sanitizer=None))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.evidence.quoted == (f"FLASH_ATTN_EXT({D2_CASE}): ERR = 1.712345678 > 0.005000000 FAIL",)
    metrics = r.evidence.case_metrics[0]["metrics"]
    assert metrics == [{"name": "ERR", "value": 1.712345678, "threshold": 0.005}]
    assert r.evidence.cases_failed == 1


def test_case_signature_below_min_value_is_not_confirmed(kv):
    entry = kv.entry("D904", d2_like(sanitizer=False, signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        metric = "ERR"
        min_value = 2.0
        '''))
    r = kv.run(entry, kv.target_for("backend_ops_case_fail", sanitizer=None))
    # a failing case that is not the signature is a different failure (exit 1), not a pass
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert "a different failure: exit 1" in r.outcome.reason


THROW_PROBE = '''
[requires]
binaries = ["test-backend-ops"]

[[repro]]
name = "throw-probe"
kind = "command"
description = "D12's throw probe."
argv = ["{{ bin['test-backend-ops'] }}", "test", "-b", "CPU", "--test-file", "/nonexistent/kvdiag-throw-probe"]
timeout = 60
'''


def test_output_signature(kv):
    entry = kv.entry("D905", THROW_PROBE + '''
        [[signature]]
        type = "output"
        stream = "stderr"
        pattern = 'Unable to read test file'
        ''')
    r = kv.run(entry, kv.target_for("backend_ops_throws", sanitizer=None))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.evidence.quoted == ("  what():  Unable to read test file",)


def test_output_signature_sees_printed_words_not_colour_codes(kv):
    """test-backend-ops colours FAIL; a pattern anchored at the end of the line must still match
    on stdout, as it does on the combined stream."""
    entry = kv.entry("D909", d2_like(sanitizer=False, signature='''
        [[signature]]
        type = "output"
        stream = "stdout"
        pattern = 'ERR = [0-9.]+ > [0-9.]+ FAIL$'
        '''))
    r = kv.run(entry, kv.target_for("backend_ops_case_fail", sanitizer=None))
    assert "\x1b[1;31mFAIL" in r.log("fast-1.stdout.log")          # coloured as printed
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert r.evidence.quoted == (f"  FLASH_ATTN_EXT({D2_CASE}): [FLASH_ATTN_EXT] ERR = 1.712345678 > "
                                 "0.005000000 FAIL",)


def test_output_signature_on_the_wrong_stream_does_not_match(kv):
    entry = kv.entry("D906", THROW_PROBE + '''
        [[signature]]
        type = "output"
        stream = "stdout"
        pattern = 'Unable to read test file'
        ''')
    r = kv.run(entry, kv.target_for("backend_ops_throws", sanitizer=None))
    assert r.outcome.verdict is not Verdict.CONFIRMED
    assert r.evidence.unmatched and "not found in stdout" in r.evidence.unmatched[0]


STALE_ENTRY = '''
[[repro]]
name = "staleness"
kind = "build-check"
description = "Is the build current with its sources?"
timeout = 60

[[signature]]
type = "stale"
'''


def _with_staleness(target, staleness):
    return dataclasses.replace(target, build=dataclasses.replace(target.build, staleness=staleness))


def test_stale_signature(kv):
    entry = kv.entry("D907", STALE_ENTRY)
    target = _with_staleness(kv.target_for("backend_ops_all_ok", sanitizer=None), Staleness(
        checked=True, stale=True, tool="ninja -n", detail="2 build step(s) would run", pending_count=2,
        pending=("[1/2] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/fattn.cu.o",
                 "[2/2] Linking CXX executable bin/test-backend-ops")))
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert any("Building CUDA object" in q for q in r.evidence.quoted)
    assert any(w.startswith("the build is stale against its sources (2 step(s) pending, ninja -n)")
               for w in r.outcome.warnings)


@pytest.mark.parametrize("stale,verdict,words", [
    (False, Verdict.NOT_REPRODUCED, "the build is current with its sources (no work to do); the ninja -n control"),
    (None, Verdict.INCONCLUSIVE, "staleness could not be determined"),
])
def test_stale_signature_other_outcomes(kv, stale, verdict, words):
    entry = kv.entry("D908", STALE_ENTRY)
    staleness = (Staleness(checked=True, stale=False, tool="ninja -n", pending=(), detail="no work to do",
                           proof="the ninja -n control (ninja 1.13.2) called a staged build current right after "
                                 "building it and stale after an edit of its header, on this machine")
                 if stale is False else Staleness(checked=False, stale=None, tool=None, pending=(),
                                                  detail="no build.ninja: build currency unknown"))
    r = kv.run(entry, _with_staleness(kv.target_for("backend_ops_all_ok", sanitizer=None), staleness))
    assert r.outcome.verdict is verdict
    assert words in r.outcome.reason


def test_a_current_answer_without_the_controls_proof_is_inconclusive(kv):
    """'Nothing to rebuild' only counts with the proof the target's staleness carries (the control
    ran when the target was prepared: engine.verdict.target.proven); a record without it proves nothing."""
    entry = kv.entry("D909", STALE_ENTRY)
    staleness = Staleness(checked=True, stale=False, tool="ninja -n", pending=(), detail="no work to do")
    r = kv.run(entry, _with_staleness(kv.target_for("backend_ops_all_ok", sanitizer=None), staleness))
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert r.outcome.reason == ("the dry run found nothing to rebuild, but no staleness control proved this dry "
                                "run on this machine")


# ------------------------------------------------------------------------- through the CLI

def test_cli_run_confirmed_exit_1(kv, monkeypatch, capsys):
    """`kvdiag run D2 --build B` builds its own target; only the GPU query is replaced."""
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    build = kv.build("backend_ops_d2_diverges")
    code = main(["run", "D2", "--build", str(build), "--sanitizer", str(kv.sanitizer()), "--quiet"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.startswith("D2 CONFIRMED")
    assert "fattn-mma-f16.cuh:1538" in out
    assert "sanitizer errors: 2048" in out
    assert D2_INSTANTIATION in out


def test_cli_run_confirmed_json(kv, monkeypatch, capsys):
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    build = kv.build("backend_ops_d2_diverges")
    code = main(["run", "D2", "--build", str(build), "--sanitizer", str(kv.sanitizer()), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["verdict"] == "confirmed" and data["attempts"][0]["evidence"]["error_count"] == 2048
    from pathlib import Path
    run_json = json.loads((Path(data["run_dir"]) / "run.json").read_text())
    assert run_json["status"] == "finished" and run_json["outcome"]["verdict"] == "confirmed"


def test_cli_run_without_a_gpu_is_skipped_exit_3(kv, monkeypatch, capsys, tmp_path):
    """The real environment, with every GPU hidden (as on a machine without one)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    build = kv.build("backend_ops_d2_diverges")
    code = main(["run", "D2", "--build", str(build)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert out.startswith("D2 SKIPPED")
    assert "no CUDA GPU is visible on this machine" in out
    runs = [p for p in (tmp_path / "home" / "runs").iterdir() if id_label(p.name) == "D2"]
    assert len(runs) == 1
    data = json.loads((runs[0] / "run.json").read_text())
    assert data["status"] == "finished" and data["outcome"]["verdict"] == "skipped"
    assert not list(runs[0].rglob("fast-*"))      # nothing ran
