"""Compile steps (D7's kind) against stand-in builds: a cmake that configures, and ninjas that
stage one outcome each (tests/scenarios/builds/{cmake_configures,ninja_*}.py, put on PATH).

What is checked: the error lines quoted and counted; a clean compile is not-reproduced only
with the control's consent; a build that never ends is cut by its budget, inconclusive, its
partial log kept and its processes gone; the scratch configure is reused for the same key
and redone for other options; what the source tree lacks is not-applicable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine_helpers import SCENARIO_BUILDS
from kvdiag.engine.verdict.compile_check import attempt_compile, scratch_key
from kvdiag.engine.verdict.judge import Gate
from kvdiag.records.verdict import Verdict
from kvdiag.workspace.kept_build import SCRATCH_DIR, STAMP, KeptBuild
from process_checks import pid_gone, wait_until

SOURCE = "ggml/src/ggml-cuda/template-instances/fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu"
ALLOWED = Gate(True, "the compile control passed on this machine (test gate)")
REFUSED = Gate(False, "the compile control's staged mismatch was not seen (test gate)")


def body(defines: str = 'GGML_CUDA = "ON", GGML_CUDA_KVARN = "ON"', timeout: int = 600) -> str:
    return f'''
[applies]
cmake_options = ["GGML_CUDA_KVARN"]

[[repro]]
name = "compile-kvarn-case"
kind = "compile"
default = true
description = "Compile one KVarN instance in a scratch build."
cmake_defines = {{ {defines} }}
sources = ["{SOURCE}"]
timeout = {timeout}
expected_seconds = 5

[[signature]]
type = "output"
stream = "combined"
pattern = 'error: no instance of function template .*flash_attn_ext_f16_process_tile'
'''


@pytest.fixture
def stage(kv, tmp_path, monkeypatch):
    """A source tree defining GGML_CUDA_KVARN, and PATH with the stand-in cmake and a ninja."""
    source = tmp_path / "src"
    (source / SOURCE).parent.mkdir(parents=True)
    (source / SOURCE).write_text('#include "../fattn-mma-kvarn-case.cuh"\n')
    (source / "ggml").mkdir(exist_ok=True)
    (source / "ggml" / "CMakeLists.txt").write_text(
        'option(GGML_CUDA_KVARN "ggml: compile CUDA/HIP KVarN kernels" OFF)\n')
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cmake").symlink_to(SCENARIO_BUILDS / "cmake_configures.py")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CMAKE_LOG", str(tmp_path / "cmake.log"))
    monkeypatch.setenv("FAKE_NINJA_PIDS", str(tmp_path / "ninja.pids"))

    def use(ninja: str):
        link = tools / "ninja"
        link.unlink(missing_ok=True)
        link.symlink_to(SCENARIO_BUILDS / f"ninja_{ninja}.py")

    build = SimpleNamespace(source_dir=source, git=SimpleNamespace(commit="775450a68" + "0" * 31))
    return SimpleNamespace(source=source, build=build, use=use, home=tmp_path / "home", tmp=tmp_path,
                           configures=lambda: len((tmp_path / "cmake.log").read_text().splitlines())
                           if (tmp_path / "cmake.log").exists() else 0)


def attempt(kv, stage, entry, *, gate=ALLOWED, budget_s=None, index=1, lines=None):
    log_dir = stage.tmp / f"logs-{index}"
    return attempt_compile(entry, entry.default_step, stage.build, stage.home, log_dir, index, budget_s=budget_s,
                           on_output=(lambda s, line: lines.append(line)) if lines is not None else None,
                           control=lambda log_dir, defines, launcher, deadline: gate)


def attempt_under(kv, stage, monkeypatch, entry, variable: str, value: str, index: int):
    """An attempt with one stand-in's behaviour switched on by ``variable``, then off again."""
    with monkeypatch.context() as patch:
        patch.setenv(variable, value)
        return attempt(kv, stage, entry, index=index)


def says(result, verdict: Verdict, words: str) -> bool:
    assert (result.verdict, words in result.reason) == (verdict, True), result.reason
    return True


def test_the_compilers_error_lines_are_quoted_and_counted(kv, stage):
    stage.use("stale_call_sites")
    entry = kv.entry("D907", body())
    result = attempt(kv, stage, entry)
    assert result.verdict is Verdict.CONFIRMED, result.reason
    assert len(result.evidence.quoted) == 4
    assert all(q.endswith('fattn-mma-kvarn-case.cuh(178): error: no instance of function template '
                          '"flash_attn_ext_f16_process_tile" matches the argument list') for q in result.evidence.quoted)
    assert "4 line(s) matched (of 4 compiler error(s)) compiling fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu.o" \
        in result.reason


def test_a_clean_compile_is_not_reproduced_only_with_the_controls_consent(kv, stage):
    stage.use("compiles_clean")
    entry = kv.entry("D907", body())
    refused = attempt(kv, stage, entry, gate=REFUSED, index=1)
    assert refused.verdict is Verdict.INCONCLUSIVE
    assert "the compile control's staged mismatch was not seen" in refused.reason
    allowed = attempt(kv, stage, entry, gate=ALLOWED, index=2)
    assert allowed.verdict is Verdict.NOT_REPRODUCED
    # the object was compiled by the first attempt: the second found it current and says so
    assert "the object(s) were current: compiled clean from these inputs by an earlier run" in allowed.reason
    assert allowed.reason.endswith("the compile control passed on this machine (test gate)")


def test_a_build_that_never_ends_is_cut_by_its_budget_and_its_partial_log_kept(kv, stage):
    stage.use("never_ends")
    entry = kv.entry("D907", body())
    lines: list[str] = []
    result = attempt(kv, stage, entry, budget_s=3, lines=lines)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "timed out" in result.reason and "the signature did not match in the partial output" in result.reason
    assert "exceeded its 3 s budget" in result.reason
    assert "partial log kept: logs/compile-kvarn-case-1-build.combined.log" in result.reason
    build_log = stage.tmp / "logs-1" / "compile-kvarn-case-1-build.combined.log"
    assert "[1/1] Building CUDA object" in build_log.read_text()
    assert any(line.startswith("[1/1] Building CUDA object") for line in lines)   # streamed to the display
    pids = [int(p) for p in (stage.tmp / "ninja.pids").read_text().split()]
    assert len(pids) == 2 and wait_until(lambda: all(pid_gone(p) for p in pids), 10)


def test_the_scratch_configure_is_reused_for_the_same_key_and_redone_for_other_options(kv, stage):
    stage.use("compiles_clean")
    entry = kv.entry("D907", body())
    first = attempt(kv, stage, entry, index=1)
    second = attempt(kv, stage, entry, index=2)
    assert (first.verdict, second.verdict) == (Verdict.NOT_REPRODUCED, Verdict.NOT_REPRODUCED)
    assert stage.configures() == 1
    assert "(configured now)" in first.reason and "(configure reused)" in second.reason
    folder = KeptBuild(stage.home / SCRATCH_DIR, scratch_key(entry.default_step, stage.build)).path
    assert json.loads((folder / STAMP).read_text())["key"]["defines"]["GGML_CUDA_KVARN"] == "ON"
    other = kv.entry("D908", body('GGML_CUDA = "ON", GGML_CUDA_KVARN = "ON", CMAKE_CUDA_ARCHITECTURES = "89"'))
    third = attempt(kv, stage, other, index=3)
    assert third.verdict is Verdict.NOT_REPRODUCED and "(configured now)" in third.reason
    assert stage.configures() == 2
    assert "-DCMAKE_CUDA_ARCHITECTURES=89" in (stage.tmp / "cmake.log").read_text().splitlines()[1]
    assert len([p for p in (stage.home / SCRATCH_DIR).iterdir() if p.is_dir()]) == 2


def test_a_failed_configure_is_inconclusive_and_not_reused(kv, stage, monkeypatch):
    stage.use("compiles_clean")
    entry = kv.entry("D907", body())
    failed = attempt_under(kv, stage, monkeypatch, entry, "FAKE_CMAKE_FAILS", "1", index=1)
    assert says(failed, Verdict.INCONCLUSIVE, "the scratch configure failed (exit 1): CMake Error at "
                                              "ggml/src/ggml-cuda/CMakeLists.txt:3")
    assert attempt(kv, stage, entry, index=2).verdict is Verdict.NOT_REPRODUCED
    assert stage.configures() == 2


def test_what_the_tree_lacks_is_not_applicable_and_says_what(kv, stage, monkeypatch):
    stage.use("compiles_clean")
    entry = kv.entry("D907", body())
    unused = attempt_under(kv, stage, monkeypatch, entry, "FAKE_CMAKE_UNUSED", "GGML_CUDA_KVARN", index=1)
    assert says(unused, Verdict.NOT_APPLICABLE, "does not use GGML_CUDA_KVARN")
    other = kv.entry("D908", body('GGML_CUDA_KVARN = "ON"'))
    not_compiled = attempt_under(kv, stage, monkeypatch, other, "FAKE_NINJA_NOT_COMPILED", Path(SOURCE).name, index=2)
    assert says(not_compiled, Verdict.NOT_APPLICABLE, f"the configured project does not compile {SOURCE}")
    (stage.source / "ggml" / "CMakeLists.txt").write_text("# upstream: no KVarN option\n")
    assert says(attempt(kv, stage, entry, index=3), Verdict.NOT_APPLICABLE, "defines GGML_CUDA_KVARN")
    (stage.source / SOURCE).unlink()
    assert attempt(kv, stage, entry, index=4).verdict is Verdict.NOT_APPLICABLE
