"""Each entry's signature, judged by kvdiag's own parsers and judge on realistic output.

For every entry: the output the defect produces (as the seeds record it) must
be confirmed, and the output of a healthy build (recorded on ggml d99724f2 where
we have it) must not be. Nothing runs: the output is handed to
`engine.evidence.observe.observe` as if a command had printed it, then to the judge.
"""

from __future__ import annotations

import gzip
import re
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.evidence.observe import observe, observe_staleness
from kvdiag.records.verdict import Verdict
from kvdiag.records.ranges import RangeEvidence
from kvdiag.registry.loader import load_registry

CONFIRMED, NOT_REPRODUCED = Verdict.CONFIRMED, Verdict.NOT_REPRODUCED
NOT_APPLICABLE, INCONCLUSIVE = Verdict.NOT_APPLICABLE, Verdict.INCONCLUSIVE

FOOTER_OK = "  Backend CUDA0: OK\n2/2 backends passed\nOK\n"
HEADER = ("ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143155 MiB):\n"
          "  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143155 MiB\n"
          "Testing 2 devices\n\nBackend 1/2: CUDA0\n  Device description: NVIDIA H200\n"
          "  Device memory: 143155 MB (142629 MB free)\n\n")
GLIBC_BT = ("/b/src/libggml-base.so.0(+0x3164b)[0x7f147af6d64b]\n"
            "/b/src/libggml-base.so.0(ggml_print_backtrace+0x21c)[0x7f147af6dacc]\n"
            "/b/src/libggml-base.so.0(ggml_abort+0x15b)[0x7f147af6dcab]\n"
            "/b/src/ggml-cuda/libggml-cuda.so.0(+0x557a81)[0x7f1475d57a81]\n"
            "/b/src/libggml-base.so.0(ggml_backend_graph_compute+0x12)[0x7f147af869f2]\n")


@dataclass
class Printed:
    """Stands in for proc.runner.CommandResult: what one command printed and how it ended."""

    stdout: str = ""
    stderr: str = ""
    returncode: int | None = 0
    signal: int | None = None
    timed_out: bool = False
    interrupted: bool = False

    def stdout_text(self) -> str:
        return self.stdout

    def stderr_text(self) -> str:
        return self.stderr

    def combined_text(self) -> str:
        return self.stdout + self.stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    def describe(self) -> str:
        return f"killed by signal {self.signal}" if self.signal else f"exit status {self.returncode}"

    def to_dict(self) -> dict:
        return {"returncode": self.returncode, "signal": self.signal}


def aborted(stdout: str, stderr: str, sig: int = signal.SIGABRT) -> Printed:
    return Printed(stdout=stdout, stderr=stderr, returncode=None, signal=int(sig))


@pytest.fixture(scope="module")
def entries():
    return {e.id: e for e in load_registry().entries}


def judge(entry, *printed: Printed, step: str | None = None, presence: RangeEvidence | None = None) -> Verdict:
    chosen = entry.step(step) if step else entry.default_step
    obs = observe(chosen, list(printed), [])
    return judge_attempt(entry, obs, Gate(True, "control passed (test)"), 1, 0.0, presence=presence).verdict


def recorded_fa_lines(transcripts_dir: Path, params: str) -> str:
    """The lines ggml d99724f2 printed on an H200 for the FA cases a params regex selects."""
    text = gzip.decompress((transcripts_dir / "test-backend-ops-fa-all-nosanitizer.log.gz").read_bytes())
    lines = [line for line in text.decode("utf-8", "replace").splitlines(keepends=True)
             if (m := re.match(r"  FLASH_ATTN_EXT\((.*?)\): ", line)) and re.search(params, m.group(1))]
    return "".join(lines)


def fa_case(type_kv: str, hsk: int = 64, softcap: str = "0.000000") -> str:
    return (f"FLASH_ATTN_EXT(hsk={hsk},hsv={hsk},nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,"
            f"logit_softcap={softcap},prec=f32,type_K={type_kv},type_V={type_kv},permute=[0,1,2,3],"
            f"kv_view=1,v_is_view_of_k=0)")


# --------------------------------------------------------------------------- D1

def test_d1_fork_abort_is_confirmed(entries):
    out = HEADER + "  " + fa_case("f16", 320) + ": OK\n"
    err = ("/src/ggml/src/ggml-cuda/fattn.cu:412: fatal error\n"
           "#3  0x00007f0000001234 in ggml_abort () from /b/libggml-base.so\n"
           "#4  0x00007f0000005678 in ggml_cuda_flash_attn_ext_vec(ggml_backend_cuda_context&, ggml_tensor*) ()"
           " from /b/libggml-cuda.so\n")
    assert judge(entries["D1"], aborted(out, err)) is CONFIRMED


def test_d1_is_confirmed_with_a_glibc_backtrace_too(entries):
    out = HEADER + "  " + fa_case("f16", 320) + ": OK\n"
    err = "/src/ggml/src/ggml-cuda/fattn.cu:412: fatal error\n" + GLIBC_BT
    assert judge(entries["D1"], aborted(out, err)) is CONFIRMED


def test_d1_other_abort_is_inconclusive(entries):
    out = HEADER + "  " + fa_case("f16", 320) + ": OK\n"
    err = "/src/ggml/src/ggml-cuda/mmq.cu:80: fatal error\n" + GLIBC_BT
    assert judge(entries["D1"], aborted(out, err)) is INCONCLUSIVE


def test_d1_on_upstream_h200_is_not_reproduced(entries, transcripts_dir):
    out = HEADER + recorded_fa_lines(transcripts_dir, "hsk=320") + "  17/17 tests passed\n" + FOOTER_OK
    assert judge(entries["D1"], Printed(stdout=out)) is NOT_REPRODUCED


# --------------------------------------------------------------------------- D3, D5, D9 (server output)

def test_d3_illegal_access_in_synchronize_is_confirmed(entries):
    err = ("srv  update_slots: decoding ...\n"
           "CUDA error: an illegal memory access was encountered\n"
           "  current device: 0, in function ggml_backend_cuda_synchronize at /src/ggml/src/ggml-cuda/ggml-cuda.cu:2786\n"
           "  cudaStreamSynchronize(cuda_ctx->stream())\n"
           "/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error\n" + GLIBC_BT)
    assert judge(entries["D3"], aborted("", err)) is CONFIRMED


def test_d3_same_error_elsewhere_is_inconclusive(entries):
    err = ("CUDA error: an illegal memory access was encountered\n"
           "  current device: 0, in function ggml_cuda_mul_mat at /src/ggml/src/ggml-cuda/ggml-cuda.cu:2100\n"
           "  cudaGetLastError()\n/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error\n")
    assert judge(entries["D3"], aborted("", err)) is INCONCLUSIVE


HOST_KV = "llama_kv_cache:  CUDA_Host KV buffer size =    18.00 MiB\n"
DRAFTED = ("slot print_timing: id  0 | task 0 | \n"
           "draft acceptance = 0.12000 (   54 accepted /   450 generated), mean len =  1.12\n")


def test_d3_clean_run_is_not_reproduced_only_with_host_kv_and_an_accepted_draft(entries):
    assert judge(entries["D3"], Printed(stderr=HOST_KV + DRAFTED)) is NOT_REPRODUCED
    assert judge(entries["D3"], Printed(stderr=HOST_KV)) is INCONCLUSIVE            # the draft path never ran
    assert judge(entries["D3"], Printed(stderr=DRAFTED)) is INCONCLUSIVE            # where the KV lived is unknown
    none_accepted = DRAFTED.replace("   54 accepted", "    0 accepted")
    assert judge(entries["D3"], Printed(stderr=HOST_KV + none_accepted)) is INCONCLUSIVE
    on_device = "llama_kv_cache:      CUDA0 KV buffer size =    18.00 MiB\n"
    assert judge(entries["D3"], Printed(stderr=on_device + DRAFTED)) is INCONCLUSIVE   # only a device buffer
    # a device buffer beside the host one is the fork's store stage of a host-resident layer (registry/D3.md)
    assert judge(entries["D3"], Printed(stderr=HOST_KV + on_device + DRAFTED)) is NOT_REPRODUCED


def test_d3_recorded_cpu_run_of_the_fork_is_not_reproduced_with_its_evidence(entries, project_dir):
    """kvdiag's own run of D3's step on a CPU-only llama-server of the fork 775450a68 with the synthesized
    MTP model (tests/fixtures/cpu-fork-775450a68-mtp): host KV, 629 of 806 drafted tokens accepted."""
    recorded = project_dir / "tests" / "fixtures" / "cpu-fork-775450a68-mtp"
    log = (recorded / "server-mtp-1.combined.log").read_text()
    entry = entries["D3"]
    obs = observe(entry.default_step, [Printed(stderr=log)], [])
    attempt = judge_attempt(entry, obs, Gate(True, "control passed (test)"), 1, 0.0)
    assert attempt.verdict is NOT_REPRODUCED
    assert "CPU KV buffer size =     4.25 MiB" in attempt.reason
    assert "draft acceptance = 0.78040 (  629 accepted /   806 generated)" in attempt.reason
    # the same log with its KV caches (target and MTP context) on a device, or with no draft accepted,
    # proves nothing
    on_device = log.replace("       CPU KV buffer size", "     CUDA0 KV buffer size")
    assert judge(entry, Printed(stderr=on_device)) is INCONCLUSIVE
    assert judge(entry, Printed(stderr=log.replace("  629 accepted", "    0 accepted"))) is INCONCLUSIVE


def test_d5_without_its_comparison_arm_is_inconclusive_whatever_the_size(entries):
    """D5 is relative (tests/engine/test_relative_signature.py runs both arms): judged alone, even
    the seed's 2,195.90 MiB is no verdict, and the reason names the arm that is missing."""
    enabled = "llama_init_from_model: enabling structured KVarN cache type kvarn_k5v5_g128\n"
    big = "sched_reserve:  CUDA_Host compute buffer size =  2195.90 MiB\n"
    assert judge(entries["D5"], Printed(stderr=enabled + big)) is INCONCLUSIVE
    assert judge(entries["D5"], Printed(stderr=big)) is INCONCLUSIVE      # KVarN fell back: nothing was tested


def test_d9_refusal_pattern(entries):
    """The fork's own line (src/llama-context.cpp, reason from src/llama-kvarn.cpp)."""
    refused = ("llama_init_from_model: cannot enable kvarn_k5v5_g128: KVarN requires a backend with KVarN store "
               "and materialization support\n")
    head_dims = ("llama_init_from_model: cannot enable kvarn_k5v5_g128: KVarN requires 128-, 256-, or "
                 "512-dimensional key/value heads\n")
    accepted = "main: server is listening on http://127.0.0.1:8080\n"
    assert judge(entries["D9"], Printed(stderr=refused, returncode=1)) is CONFIRMED
    assert judge(entries["D9"], Printed(stderr=head_dims, returncode=1)) is INCONCLUSIVE    # another refusal
    assert judge(entries["D9"], Printed(stderr=accepted)) is NOT_REPRODUCED


# --------------------------------------------------------------------------- D4, D7, D10 (fork commands)

def test_d4_assert_after_unsupported_kvarn_store_is_confirmed(entries):
    err = ("op not supported (view) (KVARN_STORE)\n"
           "/src/tests/test-kvarn.cpp:120: GGML_ASSERT(ok) failed\n" + GLIBC_BT)
    assert judge(entries["D4"], aborted("", err)) is CONFIRMED
    assert judge(entries["D4"], Printed(stdout="all KVarN tests passed\n")) is NOT_REPRODUCED


def test_d7_compiler_errors_are_confirmed_and_a_clean_object_is_not(entries):
    """The errors are nvcc 13's for the fork's KVarN instance with the repair's two nullptrs
    removed (recorded on a CPU host); the clean object is ninja's line for the same object."""
    recorded = (Path(__file__).parents[1] / "fixtures" / "compile" / "nvcc-d7-stale-call-sites.log").read_text()
    configure = Printed(stdout="-- Configuring done\n-- Generating done\n")
    assert judge(entries["D7"], configure, Printed(stdout=recorded, returncode=1)) is CONFIRMED
    built = Printed(stdout="[1/1] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/template-instances/"
                           "fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu.o\n")
    assert judge(entries["D7"], configure, built) is NOT_REPRODUCED
    other = Printed(stdout='x.cu(3): error: identifier "half2" is undefined\n', returncode=1)
    assert judge(entries["D7"], configure, other) is INCONCLUSIVE


def test_d10_ctest_verdicts(entries):
    failed = Printed(returncode=8, stdout=(
        "    Start 1: test-upstream-merge-keepers-static\n"
        "1/1 Test #1: test-upstream-merge-keepers-static ...***Failed    0.02 sec\n"
        "AssertionError: AGENTS.md does not describe the v0.4.0 CUDA policy\n\n"
        "0% tests passed, 1 tests failed out of 1\n\nThe following tests FAILED:\n"
        "\t  1 - test-upstream-merge-keepers-static (Failed)\n"))
    passed = Printed(stdout=(
        "    Start 1: test-upstream-merge-keepers-static\n"
        "1/1 Test #1: test-upstream-merge-keepers-static ...   Passed    0.02 sec\n\n"
        "100% tests passed, 0 tests failed out of 1\n"))
    missing = Printed(stdout="No tests were found!!!\n")
    assert judge(entries["D10"], failed) is CONFIRMED
    assert judge(entries["D10"], passed) is NOT_REPRODUCED
    assert judge(entries["D10"], missing) is INCONCLUSIVE


def test_d10_recorded_ctest_run_on_beellama_is_confirmed_quoting_the_failed_check(entries):
    """Our run of D10's step on BeeLlama 775450a68, configured on a CPU machine (ctest exit 8)."""
    log = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "cpu-fork-775450a68" / "D10-ctest.combined.log"
    text = log.read_text()
    d10 = entries["D10"]
    obs = observe(d10.default_step, [Printed(stdout=text, returncode=8)], [])
    attempt = judge_attempt(d10, obs, Gate(True, "control passed (test)"), 1, 0.0)
    assert attempt.verdict is CONFIRMED
    assert "AssertionError: AGENTS.md does not describe the v0.4.0 CUDA policy" in attempt.evidence.quoted
    assert any(re.search(r"18 - test-upstream-merge-keepers-static \(Failed\)", q) for q in attempt.evidence.quoted)


# --------------------------------------------------------------------------- D6, D8, D11 (backend-ops)

def test_d6_on_upstream_runs_one_case_and_is_not_reproduced(entries, transcripts_dir):
    params = entries["D6"].default_step.vars["params"]
    lines = recorded_fa_lines(transcripts_dir, params)
    assert lines.count("FLASH_ATTN_EXT(") == 1
    out = HEADER + lines + "  1/1 tests passed\n" + FOOTER_OK
    assert judge(entries["D6"], Printed(stdout=out)) is NOT_REPRODUCED


def test_d6_fa_abort_is_confirmed_and_oom_is_not(entries):
    out = HEADER + "  " + fa_case("q8_0", 128, "10.000000") + ": OK\n"
    fa_abort = "/src/ggml/src/ggml-cuda/fattn.cu:239: fatal error\n" + GLIBC_BT
    oom = ("CUDA error: out of memory\n"
           "  current device: 0, in function alloc at /src/ggml/src/ggml-cuda/ggml-cuda.cu:400\n"
           "  cudaMalloc((void **) &ptr, look_ahead_size)\n"
           "/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error\n" + GLIBC_BT)
    assert judge(entries["D6"], aborted(out, fa_abort)) is CONFIRMED
    assert judge(entries["D6"], aborted(out, oom)) is INCONCLUSIVE


def test_d8_on_upstream_matches_nothing_and_is_not_applicable_by_its_range(entries):
    """Upstream is a repository D8's ranges do not name (only the fork's): the range says it cannot be
    there. A tree the range cannot place (no .git) only says that nothing ran."""
    out = HEADER + "  0/0 tests passed\n" + FOOTER_OK
    upstream = RangeEvidence("unaffected", "this tree is llama.cpp; the entry records the defect only in BeeLlama fork")
    assert judge(entries["D8"], Printed(stdout=out), presence=upstream) is NOT_APPLICABLE
    assert judge(entries["D8"], Printed(stdout=out), presence=RangeEvidence("unknown", "no .git")) is INCONCLUSIVE
    assert judge(entries["D8"], Printed(stdout=out)) is INCONCLUSIVE


def test_d8_failing_q2_0s_case_is_confirmed(entries):
    out = HEADER + "  " + fa_case("q2_0s") + ": [FLASH_ATTN_EXT] ERR = 1.712345678 > 0.005000000 FAIL\n" \
        + "  0/1 tests passed\n  Backend CUDA0: FAIL\n1/2 backends passed\nFAIL\n"
    assert judge(entries["D8"], Printed(stdout=out, returncode=1)) is CONFIRMED


def test_d8_small_error_is_not_the_defect(entries):
    out = HEADER + "  " + fa_case("q2_0s") + ": [FLASH_ATTN_EXT] ERR = 0.006000000 > 0.005000000 FAIL\n" \
        + "  0/1 tests passed\n  Backend CUDA0: FAIL\n1/2 backends passed\nFAIL\n"
    assert judge(entries["D8"], Printed(stdout=out, returncode=1)) is not CONFIRMED


def concat_lines(status: str) -> str:
    return "".join(f"  CONCAT(type=f16,ne_a=[11,12,13,14],ne_b_d=7,dim={dim},v={v}): {status}\n"
                   for v in range(4) for dim in range(4))


def test_d11_fixed_upstream_is_not_reproduced(entries):
    out = HEADER + concat_lines("OK") + "  16/16 tests passed\n" + FOOTER_OK
    assert judge(entries["D11"], Printed(stdout=out)) is NOT_REPRODUCED


def test_d11_seed_style_fix_is_not_applicable(entries):
    out = HEADER + concat_lines("not supported [CUDA0] ") + "  0/0 tests passed\n" + FOOTER_OK
    assert judge(entries["D11"], Printed(stdout=out)) is NOT_APPLICABLE


def test_d11_before_its_fix_matches_nothing_and_is_inconclusive_never_not_applicable(entries):
    """A test-backend-ops of release b9584 lists CONCAT f32 and i32 cases only; the range places the
    tree before the fix, so the defect is there but nothing reached it."""
    out = HEADER + "  0/0 tests passed\n" + FOOTER_OK
    before = RangeEvidence("affected", "introduced 0, fixed 85f99dca8 not an ancestor of e25a32e98")
    after = RangeEvidence("fixed", "85f99dca8 is an ancestor of 9731ad3f2")
    assert judge(entries["D11"], Printed(stdout=out), presence=before) is INCONCLUSIVE
    assert judge(entries["D11"], Printed(stdout=out), presence=after) is NOT_APPLICABLE


def test_d11_f32_assert_is_confirmed(entries):
    err = "/src/ggml/src/ggml-cuda/concat.cu:149: GGML_ASSERT(src0->type == GGML_TYPE_F32) failed\n" + GLIBC_BT
    assert judge(entries["D11"], aborted(HEADER, err)) is CONFIRMED


# --------------------------------------------------------------------------- D12, D13 (build health)

HEALTHY_THROW = (
    "#1  0x00007f610a1064bb in ggml_print_backtrace () from /b/src/libggml-base.so.0\n"
    "#2  0x00007f610a119969 in ggml_uncaught_exception() () from /b/src/libggml-base.so.0\n"
    "#5  0x00007f6109ea90d8 in __cxa_throw () from /lib/x86_64-linux-gnu/libstdc++.so.6\n"
    "#6  0x00005604a08bfc02 in make_test_cases_from_file(char const*) [clone .cold] ()\n"
    "terminate called after throwing an instance of 'std::runtime_error'\n"
    "  what():  Unable to read test file\n")


def test_d12_healthy_exception_path_is_not_reproduced(entries):
    assert judge(entries["D12"], aborted("Testing 1 devices\n\n", HEALTHY_THROW)) is NOT_REPRODUCED


def test_d12_sigill_is_confirmed(entries):
    assert judge(entries["D12"], aborted("Testing 1 devices\n\n", "", signal.SIGILL)) is CONFIRMED


def test_d12_probe_that_never_threw_is_inconclusive(entries):
    usage = "Usage: test-backend-ops [mode] [-o <op,..>] [-b <backend>] [-p <params regex>]\n"
    assert judge(entries["D12"], Printed(stdout=usage, returncode=1)) is INCONCLUSIVE


@pytest.mark.parametrize("stale, expected", [(True, CONFIRMED), (False, NOT_REPRODUCED), (None, INCONCLUSIVE)])
def test_d13_staleness(entries, stale, expected):
    entry = entries["D13"]
    detail = {True: "ninja -n: 2 step(s) pending\n[1/2] Building CXX object tools/server/server-queue.cpp.o",
              False: "ninja: no work to do (targets bin/test-backend-ops)", None: "ninja not found"}[stale]
    obs = observe_staleness(entry.default_step, stale, detail)
    assert judge_attempt(entry, obs, Gate(True, "n/a"), 1, 0.0).verdict is expected
