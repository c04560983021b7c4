"""Skipped (a requirement is missing) and not-applicable (the build cannot have the defect),
both from the applicability check before anything runs and from the judge after a run
that executed no matching case."""

from __future__ import annotations

import json

import pytest

from engine_helpers import ALLOWED, NO_GPU, REFUSED, REPO, d2_like, fake_gpu
from kvdiag.cli import main
from kvdiag.records.verdict import Verdict
from kvdiag.proc.sanitizer import find_sanitizer


def assert_nothing_ran(r):
    assert r.outcome.attempts == ()
    assert r.gate_calls == []
    logs = r.run_dir.path / "logs"
    assert not logs.exists() or not any(logs.iterdir())
    data = r.run_json
    assert data["status"] == "finished" and data["outcome"]["attempts"] == []
    assert data["outcome"]["verdict"] == r.outcome.verdict.value


# ------------------------------------------------------------------------- skipped

def test_missing_binary_is_skipped_naming_it(kv, d2):
    build = kv.build(None)                       # a configured build, nothing built yet
    r = kv.run(d2, kv.target(build, sanitizer=kv.sanitizer()))
    assert r.outcome.verdict is Verdict.SKIPPED and r.outcome.verdict.exit_code == 3
    assert r.outcome.reason.startswith("missing binary: test-backend-ops (not found in ")
    assert str(build.resolve()) in r.outcome.reason
    assert "test-backend-ops op list unknown: ops not checked" in r.outcome.warnings
    assert_nothing_ran(r)


def test_missing_sanitizer_is_skipped(kv, d2, tmp_path, monkeypatch):
    # nothing on PATH but this interpreter as python3 (the fakes need it), no CUDA home,
    # no system or wheel install: this machine has no compute-sanitizer
    monkeypatch.setenv("PATH", str(tmp_path / "pybin"))
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("kvdiag.proc.sanitizer._SYSTEM_CANDIDATES", ())
    monkeypatch.setattr("kvdiag.proc.sanitizer._wheel_candidates", lambda entries: iter(()))
    assert find_sanitizer(None) is None

    target = kv.target(kv.build("backend_ops_d2_diverges"), sanitizer=None)
    assert target.sanitizer is None
    r = kv.run(d2, target)
    assert r.outcome.verdict is Verdict.SKIPPED
    assert r.outcome.reason.startswith("compute-sanitizer not found")
    assert_nothing_ran(r)


def test_no_gpu_is_skipped(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges", gpu=NO_GPU))
    assert r.outcome.verdict is Verdict.SKIPPED
    assert r.outcome.reason == "no CUDA GPU is visible on this machine"
    assert "compute capability unknown (no GPU seen): the arch range was not checked" in r.outcome.warnings
    assert_nothing_ran(r)


def test_missing_env_var_is_skipped_and_runs_once_set(kv, monkeypatch):
    entry = kv.entry("D920", d2_like(sanitizer=False, requires='env = ["LLAMA_KV_MODEL"]', signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        '''))
    target = kv.target_for("backend_ops_all_ok", sanitizer=None)
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.SKIPPED
    assert r.outcome.reason == "needs $LLAMA_KV_MODEL (e.g. a model file path)"
    assert_nothing_ran(r)

    monkeypatch.setenv("LLAMA_KV_MODEL", "/models/none.gguf")
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.NOT_REPRODUCED


def test_a_model_without_the_required_key_is_skipped_before_anything_starts(kv, monkeypatch, tmp_path):
    """D3's shape: MTP needs `<arch>.nextn_predict_layers` in the model; a synthesized llama model
    has none, an unreadable file is named, and a model that has the key goes ahead."""
    gguf = pytest.importorskip("gguf")
    from kvdiag.model.synth import ModelSpec, synthesize

    entry = kv.entry("D923", d2_like(sanitizer=False, requires='env = ["LLAMA_KV_MODEL"]\nmodel_keys = ["nextn_predict_layers"]',
                                     signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        '''))
    target = kv.target_for("backend_ops_all_ok", sanitizer=None)
    tiny = tmp_path / "tiny.gguf"
    synthesize(ModelSpec(head_dim=64, n_head=4, n_head_kv=2, n_layer=1, n_embd=64, n_ff=64), tiny)
    monkeypatch.setenv("LLAMA_KV_MODEL", str(tiny))
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.SKIPPED
    assert r.outcome.reason == ("the model in $LLAMA_KV_MODEL (tiny.gguf, architecture llama) has no "
                                "llama.nextn_predict_layers (absent): this entry needs a model that has it")
    assert_nothing_ran(r)

    (tmp_path / "text.gguf").write_text("not a model")
    monkeypatch.setenv("LLAMA_KV_MODEL", str(tmp_path / "text.gguf"))
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.SKIPPED and "cannot be read as a GGUF model" in r.outcome.reason

    mtp = tmp_path / "mtp.gguf"
    writer = gguf.GGUFWriter(str(mtp), "qwen35")
    writer.add_uint32("qwen35.nextn_predict_layers", 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.setenv("LLAMA_KV_MODEL", str(mtp))
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.NOT_REPRODUCED


@pytest.mark.parametrize("standin, verdict", [("help_lacks_mtp", Verdict.NOT_APPLICABLE),
                                               ("help_offers_mtp", Verdict.SKIPPED)])
def test_a_server_without_the_feature_is_not_applicable(kv, monkeypatch, standin, verdict):
    """D3's shape on two builds: a llama-server whose --help lacks draft-mtp cannot have the defect
    (not-applicable, before the model is even looked at); one that offers it goes on to the
    requirements and is skipped for want of $LLAMA_KV_MODEL."""
    import stat
    import sys

    build = kv.build("backend_ops_all_ok")
    exe = build / "bin" / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\n" + (REPO / "tests" / "scenarios" / "servers" / f"{standin}.py").read_text())
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    entry = kv.entry("D925", d2_like(sanitizer=False, applies='[applies]\nserver_flags = ["draft-mtp"]',
                                     requires='env = ["LLAMA_KV_MODEL"]',
                                     step_extra='requires_binaries = ["test-backend-ops", "llama-server"]\n', signature='''
        [[signature]]
        type = "case"
        status = "FAIL"
        '''))
    monkeypatch.delenv("LLAMA_KV_MODEL", raising=False)
    r = kv.run(entry, kv.target(build, sanitizer=None))
    assert r.outcome.verdict is verdict
    if verdict is Verdict.NOT_APPLICABLE:
        assert r.outcome.reason == ("this llama-server does not offer draft-mtp (not in its --help): "
                                    "the feature is absent")
    else:
        assert r.outcome.reason == "needs $LLAMA_KV_MODEL (e.g. a model file path)"
    assert_nothing_ran(r)


def test_cli_bad_sanitizer_path_is_a_usage_error(kv, capsys):
    build = kv.build("backend_ops_d2_diverges")
    code = main(["run", "D2", "--build", str(build), "--sanitizer", str(kv.root / "no-such-sanitizer")])
    assert code == 64
    assert "is not an executable compute-sanitizer" in capsys.readouterr().err


# ------------------------------------------------------------------------- not-applicable, before running

CMAKE_OPTION = '[applies]\ncmake_options = ["GGML_CUDA_KV_HOST"]'


def test_cmake_option_missing_is_not_applicable(kv):
    entry = kv.entry("D921", d2_like(applies=CMAKE_OPTION))
    r = kv.run(entry, kv.target_for("backend_ops_d2_diverges"))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE and r.outcome.verdict.exit_code == 2
    assert r.outcome.reason == "the build has no GGML_CUDA_KV_HOST option (the feature does not exist in this tree)"
    assert_nothing_ran(r)


def test_cmake_option_present_runs(kv):
    entry = kv.entry("D922", d2_like(applies=CMAKE_OPTION))
    build = kv.build("backend_ops_d2_diverges", cache_extra={"GGML_CUDA_KV_HOST:BOOL": "ON"})
    r = kv.run(entry, kv.target(build, sanitizer=kv.sanitizer()))
    assert r.outcome.verdict is Verdict.CONFIRMED


def test_applicability_is_judged_before_requirements(kv):
    """A build that cannot have the defect is not-applicable even when a binary is missing too."""
    entry = kv.entry("D923", d2_like(applies=CMAKE_OPTION))
    r = kv.run(entry, kv.target(kv.build(None), sanitizer=None))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert "GGML_CUDA_KV_HOST" in r.outcome.reason


def test_cmake_value_off_is_not_applicable(kv, d2):
    build = kv.build("backend_ops_d2_diverges", cache_extra={"GGML_CUDA:BOOL": "OFF"})
    r = kv.run(d2, kv.target(build, sanitizer=kv.sanitizer()))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "the build has GGML_CUDA=OFF, the defect needs ON"
    assert_nothing_ran(r)


def test_compute_capability_below_range_is_not_applicable(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_d2_diverges", gpu=fake_gpu(cc=(7, 0))))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "compute capability 7.0 is below 7.5"
    assert_nothing_ran(r)


def test_compute_capability_above_range_is_not_applicable(kv):
    entry = kv.entry("D924", d2_like(applies='[applies]\ncc_min = "7.5"\ncc_max = "8.9"'))
    r = kv.run(entry, kv.target_for("backend_ops_d2_diverges"))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "compute capability 9.0 is above 8.9"
    assert_nothing_ran(r)


def test_op_unknown_to_test_backend_ops_is_not_applicable(kv):
    entry = kv.entry("D925", d2_like(applies='[applies]\nops = ["FLASH_ATTN_EXT", "GATED_LINEAR_ATTN"]'))
    target = kv.target_for("backend_ops_d2_diverges")
    assert "FLASH_ATTN_EXT" in target.backend_ops.ops    # read from the fake's --list-ops
    r = kv.run(entry, target)
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "test-backend-ops does not know GATED_LINEAR_ATTN"
    assert_nothing_ran(r)


def test_backend_ops_flag_missing_is_not_applicable(kv):
    entry = kv.entry("D926", d2_like(applies='[applies]\nbackend_ops_flags = ["--seed"]'))
    r = kv.run(entry, kv.target_for("backend_ops_d2_diverges"))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "this test-backend-ops has no --seed option"
    assert_nothing_ran(r)


# ------------------------------------------------------------------------- not-applicable, after running

@pytest.mark.parametrize("gate", [ALLOWED, REFUSED], ids=["control-passed", "control-failed"])
def test_zero_matching_cases_without_a_placed_range_is_inconclusive_never_not_reproduced(kv, d2, gate):
    """The scenario build's source tree does not exist: the affected range cannot place it, so nothing
    shows the defect absent and "0 cases" is inconclusive (tests/engine/test_ranges_in_verdicts.py has
    the trees whose range says fixed, or affected)."""
    r = kv.run(d2, kv.target_for("backend_ops_no_cases"), gate=gate)
    o = r.outcome
    params = d2.step('fast').vars['params']
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.reason.startswith("not exercised by this build's tests, and nothing shows the defect absent: "
                               f"no FLASH_ATTN_EXT test case matches /{params}/ in this build (0 cases); range unknown (")
    assert o.reason.endswith(f"would exercise it: a FLASH_ATTN_EXT case matching /{params}/, which this build's "
                             f"test-backend-ops does not list")
    assert o.range.status == "unknown" and "does not exist here" in o.range.detail
    assert r.evidence.cases_matched == 0 and r.evidence.error_count == 0
    assert r.gate_calls == []
    assert "0/0 tests passed" in r.log("fast-1.stdout.log")
    assert "ERROR SUMMARY: 0 errors" in r.log("fast-1.sanitizer.log")
    assert r.run_json["outcome"]["verdict"] == "inconclusive"
    assert r.run_json["outcome"]["range"]["status"] == "unknown"


def test_all_cases_not_supported_is_not_applicable(kv, d2):
    r = kv.run(d2, kv.target_for("backend_ops_not_supported"))
    assert r.outcome.verdict is Verdict.NOT_APPLICABLE
    assert r.outcome.reason == "all 1 matching case(s) are not supported by this backend"
    assert (r.evidence.cases_matched, r.evidence.cases_executed, r.evidence.cases_not_supported) == (1, 0, 1)
    assert r.gate_calls == []


def test_fewer_cases_than_min_cases_without_a_range_is_inconclusive(kv):
    """An entry with no affected range at all: nothing says the defect cannot be here."""
    entry = kv.entry("D927", d2_like(step_extra="min_cases = 2\n"))
    r = kv.run(entry, kv.target_for("backend_ops_all_ok"))
    assert r.outcome.verdict is Verdict.INCONCLUSIVE
    assert "only 1 matching case(s) executed, 2 needed; no range (the entry names no affected range" in r.outcome.reason
    assert r.outcome.range.status == "none"


def test_cli_zero_cases_in_an_unplaced_tree_exits_4(kv, monkeypatch, capsys):
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    build = kv.build("backend_ops_no_cases")
    code = main(["run", "D2", "--build", str(build), "--sanitizer", str(kv.sanitizer()), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 4
    assert data["verdict"] == "inconclusive"
    assert data["range"]["status"] == "unknown"
