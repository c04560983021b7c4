"""Death parser: the recorded CUDA aborts and hand-written ggml/libstdc++/shell deaths."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from kvdiag.parse.aborts import (
    backtrace_symbol,
    describe_exit,
    parse_aborts,
    parse_aborts_lines,
    signal_from_returncode,
    signal_name,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MMA_CASE_4x4 = "_Z37ggml_cuda_flash_attn_ext_mma_f16_caseILi256ELi256ELi4ELi4EEvR25ggml_backend_cuda_contextP11ggml_tensor"
MMA_CASE_8x1 = "_Z37ggml_cuda_flash_attn_ext_mma_f16_caseILi256ELi256ELi8ELi1EEvR25ggml_backend_cuda_contextP11ggml_tensor"


def read(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


# -------------------------------------------------------------------- recorded


@pytest.fixture(scope="module")
def single():
    return parse_aborts(read("transcripts", "synccheck-single-case.log"))


def test_single_case_cuda_error(single):
    assert [a.kind for a in single] == ["cuda-error", "ggml-abort"]
    cuda = single[0]
    assert cuda.message == "CUDA error: unspecified launch failure"
    assert cuda.detail == "unspecified launch failure"
    assert cuda.function == "ggml_cuda_kernel_can_use_pdl"
    assert (cuda.file, cuda.line, cuda.location) == ("common.cuh", 1637, "common.cuh:1637")
    assert cuda.path == "/tmp/g/src/ggml-cuda/template-instances/../common.cuh"
    assert cuda.statement == "cudaFuncGetAttributes(&attr, kernel)"
    assert (cuda.device, cuda.line_no) == (0, 104)


def test_single_case_ggml_abort(single):
    abort = single[1]
    assert f"{abort.location}: {abort.message}" == "ggml-cuda.cu:106: CUDA error"
    assert abort.path == "/tmp/g/src/ggml-cuda/ggml-cuda.cu"
    assert abort.line_no == 113
    assert len(abort.backtrace) == 18
    assert abort.backtrace[2] == "/tmp/g/build/src/libggml-base.so.0(ggml_abort+0x15b)[0x7f147af6dcab]"
    assert abort.symbols[:3] == ("ggml_print_backtrace", "ggml_abort", "_Z15ggml_cuda_errorPKcS0_S0_iS0_")
    assert MMA_CASE_4x4 in abort.symbols
    assert abort.mentions("ggml_cuda_flash_attn_ext_mma_f16_case")
    assert not abort.mentions("ggml_cuda_flash_attn_ext_vec")
    # the CUDA error that caused the abort shares its backtrace
    assert single[0].backtrace == abort.backtrace


def test_sweep_abort():
    events = parse_aborts(read("transcripts", "synccheck-hsk256-sweep.log"))
    assert [(a.kind, a.location, a.line_no) for a in events] == [
        ("cuda-error", "common.cuh:1637", 1301),
        ("ggml-abort", "ggml-cuda.cu:106", 1305),
    ]
    assert events[0].function == "ggml_cuda_kernel_can_use_pdl"
    assert len(events[1].backtrace) == 17
    assert MMA_CASE_8x1 in events[1].symbols


def test_clean_runs_have_no_abort():
    assert parse_aborts(read("transcripts", "memcheck-single-case.log")) == ()
    with gzip.open(FIXTURES / "transcripts" / "test-backend-ops-fa-all-nosanitizer.log.gz", "rt") as fh:
        assert parse_aborts_lines(fh) == ()


# ---------------------------------------------------------------- hand-written


def test_fatal_error_in_vec_kernel():
    (abort,) = parse_aborts(read("backend_ops", "abort-fatal-error-vec.log"))
    assert (abort.kind, abort.message, abort.location) == ("ggml-abort", "fatal error", "fattn-vec.cuh:412")
    assert abort.detail == "fatal error"
    assert abort.mentions("ggml_cuda_flash_attn_ext_vec")
    assert abort.symbols == (
        "ggml_print_backtrace",
        "ggml_abort",
        "_Z28ggml_cuda_flash_attn_ext_vecR25ggml_backend_cuda_contextP11ggml_tensor",
        "ggml_backend_graph_compute",
    )


def test_assert_on_a_case_line_with_gdb_backtrace():
    assertion, sig = parse_aborts(read("backend_ops", "abort-ggml-assert-gdb.log"))
    assert (assertion.kind, assertion.location, assertion.line_no) == ("ggml-assert", "fattn.cu:287", 1)
    assert assertion.message == "GGML_ASSERT(K->ne[0] % 8 == 0) failed"
    assert assertion.detail == "K->ne[0] % 8 == 0"
    assert assertion.symbols == (
        "__GI___wait4", "ggml_print_backtrace", "ggml_abort", "ggml_cuda_flash_attn_ext",
        "ggml_backend_cuda_graph_compute", "main",
    )
    assert (sig.kind, sig.detail, sig.line_no) == ("signal", "SIGABRT", 15)


def test_uncaught_exception_takes_the_preceding_backtrace():
    (exc,) = parse_aborts(read("backend_ops", "abort-test-file-exception.log"))
    assert exc.kind == "cpp-exception"
    assert exc.message == "terminate called after throwing an instance of 'std::runtime_error'"
    assert (exc.function, exc.detail) == ("std::runtime_error", "Unable to read test file")
    assert len(exc.backtrace) == 8
    assert exc.symbols == ("ggml_print_backtrace", "_ZSt9terminatev", "__cxa_throw", "__libc_start_main")


def test_old_build_cuda_error_mid_case_line():
    cuda, abort = parse_aborts(read("backend_ops", "console-old-running.log"))
    assert (cuda.kind, cuda.detail) == ("cuda-error", "an illegal memory access was encountered")
    assert (cuda.function, cuda.location, cuda.statement) == (
        "ggml_backend_cuda_synchronize", "ggml-cuda.cu:2512", "cudaStreamSynchronize(cuda_ctx->stream())",
    )
    assert (abort.kind, abort.location) == ("ggml-abort", "ggml-cuda.cu:75")


@pytest.mark.parametrize(
    "line, name",
    [
        ("Segmentation fault (core dumped)", "SIGSEGV"),
        ("Segmentation fault", "SIGSEGV"),
        ("Illegal instruction", "SIGILL"),
        ("Illegal instruction (core dumped)", "SIGILL"),
        ("Killed", "SIGKILL"),
        ("bash: line 1: 12345 Segmentation fault      (core dumped) ./test-backend-ops -o ADD", "SIGSEGV"),
    ],
)
def test_signals(line, name):
    (event,) = parse_aborts(f"some output\n{line}\n")
    assert (event.kind, event.detail, event.message, event.line_no) == ("signal", name, line, 2)


def test_older_formats_and_other():
    text = (
        "GGML_ASSERT: /src/llama.cpp/ggml.c:4187: ne % 2 == 0\n"
        "CUDA error 700 at /src/llama.cpp/ggml-cuda.cu:6246: an illegal memory access was encountered\n"
        "current device: 0\n"
        "double free or corruption (out)\n"
        "terminate called without an active exception\n"
    )
    events = parse_aborts(text)
    assert [(a.kind, a.location, a.detail) for a in events] == [
        ("ggml-assert", "ggml.c:4187", "ne % 2 == 0"),
        ("cuda-error", "ggml-cuda.cu:6246", "an illegal memory access was encountered"),
        ("other", None, None),
        ("cpp-exception", None, None),
    ]
    assert events[1].device == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "Test Aborted by user because Segmentation fault happened earlier\n",
        "main.cpp:12:5: warning: unused variable\n",
        "random \x00\xff junk\n#include <x>\n",
    ],
)
def test_garbage_has_no_aborts(text):
    assert parse_aborts(text) == ()


def test_to_dict_and_frozen(single):
    data = json.loads(json.dumps(single[1].to_dict()))
    assert data["kind"] == "ggml-abort" and data["location"] == "ggml-cuda.cu:106"
    assert data["symbols"][1] == "ggml_abort" and len(data["backtrace"]) == 18
    with pytest.raises(dataclasses.FrozenInstanceError):
        single[0].kind = "signal"  # type: ignore[misc]


def test_backtrace_symbol_forms():
    assert backtrace_symbol("/x/lib.so(+0x3164b)[0x7f]") is None
    assert backtrace_symbol("/x/lib.so(ggml_abort+0x15b)[0x7f147af6dcab]") == "ggml_abort"
    assert backtrace_symbol("#3  0x00007f in ggml_cuda_op(ggml_tensor*) () from /x.so") == "ggml_cuda_op"
    assert backtrace_symbol("2: 0x7f147af6dcab ggml_abort") == "ggml_abort"
    assert backtrace_symbol("plain text") is None


# ------------------------------------------------------------------ exit codes


@pytest.mark.parametrize(
    "returncode, sig, shell, expected",
    [
        (134, None, False, "exit 134"),
        (134, None, True, "killed by SIGABRT (6)"),
        (-6, None, False, "killed by SIGABRT (6)"),
        (None, 4, False, "killed by SIGILL (4)"),
        (-11, None, False, "killed by SIGSEGV (11)"),
        (0, None, False, "exit 0"),
        (1, None, True, "exit 1"),
        (None, None, False, "no exit status"),
    ],
)
def test_describe_exit(returncode, sig, shell, expected):
    assert describe_exit(returncode, sig, shell=shell) == expected


def test_signal_from_returncode():
    assert signal_from_returncode(-11) == 11
    assert signal_from_returncode(139) is None
    assert signal_from_returncode(139, shell=True) == 11
    assert signal_from_returncode(128, shell=True) is None
    assert signal_from_returncode(0, shell=True) is None
    assert signal_from_returncode(None) is None
    assert signal_name(6) == "SIGABRT" and signal_name(200) == "SIG200"
