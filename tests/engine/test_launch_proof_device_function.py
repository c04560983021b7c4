"""An entry written as a user would: its racecheck signature names the device function racecheck reports.

ggml's ``block_reduce`` (common.cuh) is a ``__device__`` template inlined into ``soft_max_f32``;
before 3e12f441 (2026-08-03, "CUDA: Fix data-races when reusing SMEM in block_reduce",
llama.cpp #26385) softmax reused its shared buffer across two block_reduce calls without a
barrier, and racecheck reports the hazard at ``block_reduce<…>`` (common.cuh:638 against :643).
The runs are replayed from tests/fixtures/sanitizer/racecheck-block-reduce-{race,clean}.log
(the recorded transcripts' format, 20 SOFT_MAX cases, the launch probe's ``kvdiag-launch:``
lines) by tests/scenarios/builds/backend_ops_replays_racecheck.py. The build's symbol listing
has the ``soft_max_f32`` kernels and, as on any build, no ``block_reduce`` symbol: an inlined
device function has none.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from engine_helpers import FIXTURES
from kvdiag.records.verdict import Verdict
from kvdiag.probes.program_rebuild import ProbeProgram
from kvdiag.workspace.kernel_symbols import KernelSymbols

SOFT_MAX_KERNELS = ("soft_max_f32<true, 0, 0, float>", "soft_max_f32<true, 0, 0, __half>",
                    "soft_max_f32<false, 0, 0, float>", "soft_max_back_f32")

USER_ENTRY = """
    [applies]
    cmake_values = { GGML_CUDA = "ON" }

    [requires]
    binaries = ["test-backend-ops"]
    sanitizer = true
    gpu = true

    [[repro]]
    name = "fast"
    kind = "backend-ops"
    sanitizer = "racecheck"
    vars = { op = "SOFT_MAX", params = 'ne=\\[(?:1024|2048|4096),' }
    description = "SOFT_MAX rows of 1024 columns or more (more than one warp per block) under racecheck."
    argv = ["{{ bin['test-backend-ops'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", "-p", "{{ params }}"]
    timeout = 120

    [[signature]]
    type = "sanitizer"
    tool = "racecheck"
    kind = "race-hazard"
    site = 'common\\.cuh:\\d+'
    kernel = "block_reduce"
    """


@pytest.fixture
def user_entry(kv):
    return kv.entry("D940", USER_ENTRY)


def replayed(kv, log: str):
    """A build replaying ``log``, run through the launch probe's program, with its symbol listing."""
    build = kv.build("backend_ops_replays_racecheck")
    shutil.copyfile(FIXTURES / "sanitizer" / f"racecheck-block-reduce-{log}.log", build / "replay.log")
    target = kv.target(build, sanitizer=kv.sanitizer())
    program = ProbeProgram("test-backend-ops-launch", path=build / "bin" / "test-backend-ops", reused=True)
    symbols = KernelSymbols(str(build / "bin" / "libggml-cuda.so"), "cuobjdump", SOFT_MAX_KERNELS)
    return build, dataclasses.replace(target, probe_program=lambda: program, kernel_symbols=lambda: symbols)


def test_the_broken_build_confirms_quoting_the_race_in_the_device_function(kv, user_entry):
    _, target = replayed(kv, "race")
    o = kv.run(user_entry, target).outcome
    assert o.verdict is Verdict.CONFIRMED, o.reason
    assert o.reason == "1/1 runs matched the signature: 1 printed finding(s) of kind race-hazard at common.cuh:638"
    quoted = o.attempts[0].evidence.quoted
    assert quoted[0].startswith("Error: Race reported between Write access at float block_reduce<")


def test_the_fixed_build_whose_cases_ran_clean_is_not_reproduced_not_not_applicable(kv, user_entry):
    build, target = replayed(kv, "clean")
    o = kv.run(user_entry, target).outcome
    assert o.verdict is Verdict.NOT_REPRODUCED, o.reason
    assert o.reason.startswith("20 matching case(s) executed (20 OK, 0 FAIL); the signature did not match; ")
    assert ("launch not checked: kernels matching /block_reduce/: none among this build's __global__ symbols "
            "(4 kernel symbol(s) in libggml-cuda.so (cuobjdump)), and the entry names no launched kernel") in o.reason
    assert "launched under racecheck: soft_max_f32<true, 0, 0, float>, soft_max_f32<true, 0, 0, __half>" in o.reason
    assert o.attempts[0].evidence.launched        # the launches were listed: the probe's program ran
    assert "ne=\\[(?:1024|2048|4096)," in (build / "invocations.log").read_text()


def test_a_kernel_the_entry_names_as_launched_still_gives_not_applicable_from_symbols(kv, user_entry):
    """The rule itself stands: a regex that a measured radius shows matching a launched __global__
    kernel, absent from the symbols, is build evidence that the defect's code cannot run."""
    build, target = replayed(kv, "clean")
    kernel_regex = dataclasses.replace(user_entry.signature[0], kernel="^soft_max_f32<true, 0, 1024,")
    named = dataclasses.replace(user_entry, signature=(kernel_regex,),
                                radius=({"commit": "0123abc", "kernels": ["soft_max_f32<true, 0, 1024, float>"]},))
    without = KernelSymbols(str(build / "bin" / "libggml-cuda.so"), "cuobjdump", ("soft_max_back_f32",))
    o = kv.run(named, dataclasses.replace(target, kernel_symbols=lambda: without)).outcome
    assert o.verdict is Verdict.NOT_APPLICABLE, o.reason
    assert "this build contains no kernel the entry is about (kernels matching /^soft_max_f32<true, 0, 1024,/)" in o.reason
