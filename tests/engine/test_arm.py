"""What makes two runs the same arm (kvdiag.engine.verdict.arm), and how verify concludes on two rates."""

from __future__ import annotations

from pathlib import Path

from kvdiag.engine.verdict.arm import arm_differences, input_names
from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.engine.verify.session import Conclusion, Side, conclude
from kvdiag.registry.entry import Step

ARM = {"format": 1, "entry": "D3", "step": "server-mtp", "runs": 10, "overrides": {},
       "repro": {"step": {"argv": ["a"], "timeout": 900}, "comparison_arm": None, "signature": [{"type": "abort"}]},
       "build": {"dir": "/b", "commit": "1" * 40, "files": {"bin/llama-server": {"path": "/b/bin/llama-server",
                                                                                "size": 10, "mtime_ns": 1}}},
       "inputs": {"LLAMA_KV_MODEL": {"value": "/m.gguf", "file": {"path": "/m.gguf", "size": 5, "mtime_ns": 2}}},
       "machine": {"gpus": [["NVIDIA H200", "9.0"]], "driver": "580.1"}}


def changed(**parts) -> dict:
    return {**ARM, **parts}


def test_the_same_arm_has_no_difference_and_the_runs_are_not_one():
    assert arm_differences(ARM, ARM) == []
    assert arm_differences(ARM, changed(runs=20)) == []     # --runs may differ between the arms


def test_each_part_of_an_arm_is_named_when_it_differs():
    other_build = {**ARM["build"], "commit": "2" * 40, "files": {}}
    assert arm_differences(ARM, changed(build=other_build)) == [
        "the build's commit differs (111111111111 then, 222222222222 now)",
        "the build's files differ (rebuilt since?): bin/llama-server (10 bytes, modified 1970-01-01 00:00:00.000 UTC "
        "then, absent now)"]
    machine = {"gpus": [["NVIDIA RTX 4070", "8.9"]], "driver": "580.1"}
    assert arm_differences(ARM, changed(machine=machine)) == [
        "the machine differs (NVIDIA H200 (9.0), driver 580.1 then, NVIDIA RTX 4070 (8.9), driver 580.1 now)"]
    repro = {**ARM["repro"], "step": {"argv": ["b"], "timeout": 60}, "comparison_arm": {"argv": ["c"]}}
    assert arm_differences(ARM, changed(repro=repro, step="fast")) == [
        "the step differs (server-mtp then, fast now)",
        "the repro step's argv, timeout differ in the registry",
        "the comparison arm's step's argv differs in the registry"]
    assert arm_differences(ARM, changed(inputs={})) == ["$LLAMA_KV_MODEL differs (/m.gguf then, unset now)"]


def test_a_file_named_by_an_environment_variable_is_judged_by_the_file():
    recorded = ARM["inputs"]["LLAMA_KV_MODEL"]
    respelled = {"LLAMA_KV_MODEL": {**recorded, "value": "./m.gguf"}}
    assert arm_differences(ARM, changed(inputs=respelled)) == []
    gone = {"LLAMA_KV_MODEL": {"value": "/m.gguf"}}
    assert arm_differences(ARM, changed(inputs=gone)) == [
        "the file $LLAMA_KV_MODEL names changed (/m.gguf: 5 bytes, modified 1970-01-01 00:00:00.000 UTC then, "
        "absent now)"]
    moved = {"LLAMA_KV_MODEL": {"value": "/n.gguf", "file": {**recorded["file"], "path": "/n.gguf"}}}
    assert arm_differences(ARM, changed(inputs=moved)) == [
        "$LLAMA_KV_MODEL names another file (/m.gguf then, /n.gguf now)"]


def test_the_inputs_are_the_env_the_templates_read():
    step = Step(name="s", kind="server", description="d", timeout=1,
                argv=("{{ bin['llama-server'] }}", "-m", "{{ model }}", "--draft", "{{ env['DRAFT_MODEL'] }}"),
                env={"X": "{{ env.OTHER }}"})

    class Requires:
        env = ("LLAMA_KV_BUILD",)

    entry = type("E", (), {"requires": Requires})()
    assert input_names(entry, step) == ["DRAFT_MODEL", "LLAMA_KV_BUILD", "LLAMA_KV_MODEL", "OTHER"]


def flaky(entry: str, *verdicts: Verdict) -> Outcome:
    attempts = tuple(Attempt(step="s", index=i, verdict=v, reason=v.value, evidence=Evidence())
                     for i, v in enumerate(verdicts, 1))
    verdict = Verdict.CONFIRMED if Verdict.CONFIRMED in verdicts else Verdict.NOT_REPRODUCED
    return Outcome(entry, verdict, f"{sum(v is Verdict.CONFIRMED for v in verdicts)}/{len(verdicts)}", attempts)


def test_a_flaky_fix_is_not_called_verified_when_the_rates_cannot_be_told_apart():
    before = Side("before", Path("b"), flaky("D3", Verdict.CONFIRMED, *[Verdict.NOT_REPRODUCED] * 9))
    after = Side("after", Path("a"), flaky("D3", *[Verdict.NOT_REPRODUCED] * 10), numeric_possible=False)
    conclusion, why = conclude(before, after)
    assert conclusion is Conclusion.INCONCLUSIVE
    assert why == ("the signature did not match after the fix, but the runs cannot tell the two rates apart (1/10 "
                   "before, 0/10 after; Fisher's exact test p = 1): more runs (--runs N) can")
    before = Side("before", Path("b"), flaky("D3", *[Verdict.CONFIRMED] * 5, *[Verdict.NOT_REPRODUCED] * 5))
    conclusion, why = conclude(before, after)
    assert conclusion is Conclusion.INCONCLUSIVE      # told apart (p = 0.0325), but results were not checked
    assert why.endswith("the entry has no test-backend-ops step to check them with")
