#!/usr/bin/env python3
"""A test-backend-ops with a FLASH_ATTN_EXT case space, for `kvdiag scan` (tests/engine/test_scan.py).

The cases are DEFAULT_CASES below, or the lines of `<build>/case-space.txt` when a test
wrote one. A case whose type_K is q5_1 is not supported by CUDA0; every other case
behaves by its `nb=` marker:

    nb=3    diverges: under the sanitizer the MMA tile kernel's barrier findings are handed
            to it (file:line fattn-mma-f16.cuh:1538; the instantiation follows nr23, and
            kv=113 adds a second tile instantiation at the same line, as recorded on the
            H200), then `CUDA error: unspecified launch failure` and SIGABRT. Bare: OK.
    nb=32   OK
    nb=1    OK, and it launches only the vector kernel and its combiner (none of D2's
            kernels), as the H200 recorded for 901 cases of D2's whole-op scan
    nb=75   a different death: `CUDA error: out of memory` at ggml-cuda.cu:96, SIGABRT
    nb=512  hangs: forks a grandchild, both sleep forever

`support` mode lists the selected cases as `SUPPORTED` / `NOT SUPPORTED` (ANSI colours as
the real printer). `test` mode runs the cases `-p` selects (kvdiag's scan selects one).
`launch` mode (the launch probe's, probes/test-backend-ops-launch.patch) runs them the same
way; with KVDIAG_PRINT_LAUNCHES set a case prints the probe's `kvdiag-launch:` line of its
kernel before it runs (nb=3 and nb=32 cases: the MMA kernel whose instantiation follows nr23),
and every process appends its mode to `<build>/modes.log`. With CUDA_INJECTION64_PATH set it
behaves as the program did under kvdiag's CUPTI lister on an H100: the lister's ready line, then
the launch lines, and beside the sanitizer a refusal on stderr and no launch line. A case that runs under the
sanitizer appends its parameters to `<build>/sanitized.log` (what a routed scan must spare).

For the tests, every test-mode process records itself: its `-p` pattern is appended to
`<build>/invocations.log`, and a file `<build>/pids/<pid>.<role>` is made for itself
(`program`) and for a hang's grandchild (`grandchild`).
"""
import os
import re
import sys
import time

import fakeops

TEMPLATE = ("hsk={hsk},hsv={hsk},nh=4,nr23=[{nr}],kv={kv},nb={nb},mask=1,sinks=0,max_bias=0.000000,"
            "logit_softcap=0.000000,prec=f32,type_K={t},type_V={t},permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")


def case_params(nr: str, kv: int, nb: int, t: str = "f16", hsk: int = 256) -> str:
    return TEMPLATE.format(hsk=hsk, nr=nr, kv=kv, nb=nb, t=t)


DEFAULT_CASES = [
    case_params("4,1", 512, 3),
    case_params("4,1", 1024, 3),
    case_params("1,1", 512, 3),
    case_params("1,1", 113, 3),
    case_params("4,1", 512, 32),
    case_params("1,1", 512, 32),
    case_params("4,1", 1024, 32),
    case_params("1,1", 113, 32, "q8_0"),
    case_params("4,1", 512, 512),
    case_params("4,1", 512, 75),
    case_params("4,1", 512, 3, "q5_1"),
    case_params("1,1", 512, 32, "q5_1"),
    case_params("4,1", 512, 3, hsk=128),     # outside -p hsk=256
]

SUPPORTED = "\x1b[1;32mSUPPORTED\x1b[0m"
NOT_SUPPORTED = "\x1b[1;31mNOT SUPPORTED\x1b[0m"

TILE = ("void flash_attn_ext_f16_process_tile<(int)256, (int)256, (int){c1}, (int){c2}, (int)2, (bool)0, (bool)0, "
        "(bool){a}, (bool){b}>(const float2 *, const __half2 *, const __half2 *, const __half *, const float *, "
        "float2 *, float2 *, float, float, float, uint3, int, int, int, int, int, int, int, int, int, int, int, int)"
        "+0x15b50 in fattn-mma-f16.cuh:1538")
GLOBAL = ("void flash_attn_ext_f16<(int)256, (int)256, (int){c1}, (int){c2}, (bool)0, (bool)0>(const char *, "
          "const char *, const char *, const char *, const char *, const int *, float *, float2 *, float, float, "
          "float, float, unsigned int, float, int, uint3, int, int, int, int, int, int, int, int, int, int, int, "
          "long, int, int, long, int, int, int, int, int, long)+0xfbf0 in fattn-mma-f16.cuh:1878")
PRINTED_PER_KERNEL = 3
# the ERROR SUMMARY count of a diverging case, by (nr23, kv)
ERRORS = {("[4,1]", "512"): 2048, ("[4,1]", "1024"): 4096, ("[1,1]", "512"): 1024, ("[1,1]", "113"): 256}
M = fakeops.MARKER


def cases() -> list[str]:
    return fakeops.case_space(DEFAULT_CASES)


def param(params: str, key: str) -> str:
    m = re.search(rf"(?:^|,){key}=(\[[^\]]*\]|[^,]*)", params)
    return m.group(1) if m else ""


def supported(params: str) -> bool:
    return param(params, "type_K") != "q5_1"


def record(role: str, pid: int) -> None:
    folder = fakeops.BUILD / "pids"
    folder.mkdir(exist_ok=True)
    (folder / f"{pid}.{role}").write_text("")


def log_invocation() -> None:
    fd = os.open(fakeops.BUILD / "invocations.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ((fakeops.option("-p") or "") + "\n").encode())
    finally:
        os.close(fd)


def findings(params: str) -> list[str]:
    """The sanitizer's view of a diverging case: a few printed findings per tile kernel, the summary.

    Reported into the program's stdout (a scan batch), each kernel's records end with the
    tool's buffer-overflow warning and there is no summary here: the tool prints one
    summary for the whole process."""
    c1, c2 = ("4", "4") if param(params, "nr23") == "[4,1]" else ("8", "1")
    flags = [("0", "1")] + ([("1", "0")] if param(params, "kv") == "113" else [])
    errors = ERRORS.get((param(params, "nr23"), param(params, "kv")), 512)
    lines: list[str] = []
    for a, b in flags:
        for thread in range(PRINTED_PER_KERNEL):
            lines += [f"{M} Barrier error detected. Divergent thread(s) in block.",
                      f"{M}     at {TILE.format(c1=c1, c2=c2, a=a, b=b)}",
                      f"{M}     by thread ({thread},0,0) in block (52,0,0)",
                      f"{M}         Device Frame: {GLOBAL.format(c1=c1, c2=c2)}",
                      f"{M} "]
        if fakeops.streamed_report():
            lines.append(f"{M} Warning: Error buffer overflow has been detected. Some records have been dropped")
    if fakeops.streamed_report():
        return lines
    printed = PRINTED_PER_KERNEL * len(flags)
    lines += [f"{M} Error: process didn't terminate successfully",
              f"{M} Target application returned an error",
              f"{M} ERROR SUMMARY: {errors} errors",
              f"{M} ERROR SUMMARY: {errors - printed} errors were not printed. "
              "Use --print-limit option to adjust the number of printed errors"]
    return lines


def backtrace() -> None:
    fakeops.err("/src/ggml/build/bin/libggml-base.so(ggml_print_backtrace+0x21c)[0x7f147af6dacc]")
    fakeops.err("/src/ggml/build/bin/libggml-base.so(ggml_abort+0x15b)[0x7f147af6dcab]")
    fakeops.err("/src/ggml/build/bin/libggml-cuda.so(_Z15ggml_cuda_errorPKcS0_S0_iS0_+0xb7)[0x7f1475adfc07]")
    fakeops.err("/src/ggml/build/bin/test-backend-ops(+0x27bba)[0x5562a2410bba]")


def diverge(params: str) -> None:
    fakeops.sanitizer_sees(findings(params))
    if fakeops.destroy_on_device_error() == "kernel":
        return   # the tool ended the kernel only: the case goes on, and prints OK as on the H200
    fakeops.err("CUDA error: unspecified launch failure")
    fakeops.err("  current device: 0, in function ggml_backend_cuda_synchronize at "
                "/src/ggml/src/ggml-cuda/ggml-cuda.cu:2751")
    fakeops.err("  cudaStreamSynchronize(cuda_ctx->stream())")
    fakeops.err("/src/ggml/src/ggml-cuda/ggml-cuda.cu:106: CUDA error")
    backtrace()
    fakeops.die("SIGABRT")


def out_of_memory() -> None:
    fakeops.err("CUDA error: out of memory")
    fakeops.err("  current device: 0, in function alloc at /src/ggml/src/ggml-cuda/ggml-cuda.cu:431")
    fakeops.err("  cuMemCreate(&handle, reserve_size, &prop, 0)")
    fakeops.err("/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error")
    backtrace()
    fakeops.die("SIGABRT")


def hang() -> None:
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(60)
    record("grandchild", pid)
    while True:
        time.sleep(60)


def support_mode() -> None:
    fakeops.header()
    for params in fakeops.selected(cases()):
        fakeops.case(params, SUPPORTED if supported(params) else NOT_SUPPORTED)
    fakeops.out(f"  Backend CUDA0: {fakeops.GREEN_OK}")
    fakeops.out("Backend 2/2: CPU")
    fakeops.out("  Skipping CPU backend")
    fakeops.out("2/2 backends passed")
    fakeops.out(fakeops.GREEN_OK)


LAUNCH = ("void flash_attn_ext_f16<256, 256, {c1}, {c2}, false, false>(char const*, char const*, char const*, "
          "char const*, char const*, int const*, float*, float2*, float, float, float, float, unsigned int, float, "
          "int, uint3, int, int, int, int, int, int, int, int, int, int, int, long, int, int, long, int, int, int, "
          "int, int, long)")


VEC_LAUNCHES = ("void flash_attn_ext_vec<256, 1, (ggml_type)1, (ggml_type)1, false>(char const*, char const*, "
                "char const*, char const*, char const*, int const*, float*, float2*, float, float, float, float, "
                "unsigned int, float, int, uint3, int, int, int, int, int, int, int, int, int, int, int, long, int, "
                "int, long, int, int, int, int, int, long)",
                "void flash_attn_combine_results<256>(float const*, float2 const*, float*, int)")


def cupti_lister_listing() -> bool:
    """As kvdiag's CUPTI lister did on an H100 (tests/fixtures/device/h100-launch-lister): named in
    CUDA_INJECTION64_PATH it prints its ready line first and then lists; beside compute-sanitizer CUPTI
    refuses it, and it says so on stderr and lists nothing."""
    if not os.environ.get("CUDA_INJECTION64_PATH"):
        return False
    if fakeops.under_sanitizer():
        fakeops.err("kvdiag-launch-lister: not listing: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        return False
    fakeops.out("kvdiag-launch-lister: cupti 130001")
    return True


def launch_line(params: str) -> None:
    if not os.environ.get("KVDIAG_PRINT_LAUNCHES"):
        return
    if os.environ.get("CUDA_INJECTION64_PATH") and fakeops.under_sanitizer():
        return                                     # the lister was refused: nothing is listed
    if param(params, "nb") in ("3", "32"):
        c1, c2 = ("4", "4") if param(params, "nr23") == "[4,1]" else ("8", "1")
        fakeops.out("kvdiag-launch: " + LAUNCH.format(c1=c1, c2=c2))
    elif param(params, "nb") == "1":
        for launch in VEC_LAUNCHES:
            fakeops.out("kvdiag-launch: " + launch)


def log_sanitized(params: str) -> None:
    if fakeops.under_sanitizer():
        with open(fakeops.BUILD / "sanitized.log", "a") as fh:
            fh.write(params + "\n")


def test_mode() -> None:
    record("program", os.getpid())
    log_invocation()
    with open(fakeops.BUILD / "modes.log", "a") as fh:
        fh.write(sys.argv[1] + "\n")
    cupti_lister_listing()
    fakeops.header()
    selected = fakeops.selected(cases())
    passed = 0
    for params in selected:
        if not supported(params):
            fakeops.case(params, "not supported [CUDA0] ")
            passed += 1
            continue
        nb = param(params, "nb")
        log_sanitized(params)
        launch_line(params)
        if nb == "3" and fakeops.under_sanitizer():
            diverge(params)
        elif nb == "75":
            out_of_memory()
        elif nb == "512":
            hang()
        fakeops.case(params)
        passed += 1
    fakeops.footer(passed, len(selected))


fakeops.handle_probes(modes=("test", "perf", "grad", "support", "launch"))
if sys.argv[1] == "support":
    support_mode()
else:
    test_mode()
