#!/usr/bin/env python3
"""A test-backend-ops with a small whole suite, for `kvdiag discover` (tests/engine/test_discover*.py).

Five ops; each case behaves by its op and parameters, and only under the tool that sees it:

    CPY        type_dst=q4_0: racecheck reports a race in cpy_f32_q (cpy.cu:57 against cpy.cu:60);
               ne=[4096,...] with q4_0 also FAILs the numeric test. type_dst=f16 is clean.
    SOFT_MAX   racecheck reports a race in the inlined device function block_reduce (common.cuh:512),
               its device frame the kernel soft_max_f32, and a racecheck *warning* at softmax.cu:170.
    ADD        clean.
    MUL_MAT    n=7 aborts under any tool: GGML_ASSERT(ne00 % 32 == 0) at ggml-cuda.cu:1234, SIGABRT.
    GET_ROWS   v=9 hangs (a budget overrun); the other GET_ROWS cases are clean.
    SCALE      listed NOT SUPPORTED by the backend.

With a file `<build>/long-line`, each ADD case first prints a megabyte line without a space.
With a file `<build>/divergent-barrier`, synccheck reports a divergent barrier in the inlined
block_reduce (common.cuh:530) in every SOFT_MAX case, with its device frame (the kernel
soft_max_f32) only when the sanitizer prints frames (--show-backtrace).

`support` mode lists the cases (`-o` a comma-separated list of ops, `-p` a regex); `test` mode
runs the selected ones, printing each case's status after it ran (current ggml's convention),
and appends its `-o`/`-p` to `<build>/invocations.log`. `launch` mode (the launch probe's) runs
them the same way with no numeric comparison: CPY's FAIL prints OK; it and test mode append
`<mode> <sanitizer tool or none> <-o>` to `<build>/modes.log`. With a file `<build>/numeric-aborts`,
SOFT_MAX aborts in test mode when no sanitizer runs it (the numeric test's own run).

With KVDIAG_PRINT_LAUNCHES set, `launch` mode prints the launch probe's line of each kernel a case
launches, with the shared memory it holds (`LAUNCHES`): CPY to q4_0 and SOFT_MAX hold some (their
races need it), CPY to f16, ADD and GET_ROWS none, MUL_MAT n=1 none, and the other MUL_MAT cases call
cuBLAS, whose shared memory the probe cannot say. With a file `<build>/blind-launches` it prints
none (a program whose launches the probe cannot see, as with a static CUDA runtime).
"""
import os
import re
import sys
import time

import fakeops

CASES = {
    "CPY": ["type_src=f32,type_dst=q4_0,ne=[32,4,1,1]", "type_src=f32,type_dst=q4_0,ne=[4096,4,1,1]",
            "type_src=f32,type_dst=f16,ne=[32,4,1,1]", "type_src=f32,type_dst=f16,ne=[256,4,4,1]"],
    "SOFT_MAX": ["type=f32,ne=[16,2,1,1],mask=0", "type=f32,ne=[1024,8,1,1],mask=1"],
    "ADD": ["type=f32,ne=[10,5,4,3],nr=[1,1,1,1]", "type=f32,ne=[16,10,1,1],nr=[2,1,1,1]"],
    "MUL_MAT": ["type_a=f16,m=16,n=1,k=256", "type_a=f16,m=16,n=7,k=250", "type_a=f16,m=16,n=9,k=256",
                "type_a=f32,m=32,n=1,k=256"],
    "GET_ROWS": ["type=f32,n=256,m=5,r=4,v=0", "type=f32,n=256,m=5,r=4,v=9", "type=f16,n=256,m=5,r=4,v=0"],
    "SCALE": ["type=f32,ne=[10,10,10,10]"],
}
M = fakeops.MARKER
CPY_FN = "void cpy_f32_q<&quantize_block_q4_0, (int)32>(const char *, char *, int, int, int, int, int, int, int, int)"
BLOCK_REDUCE = "float block_reduce<(block_reduce_method)0, (int)1024>(float, float *)"
SOFT_MAX_FN = ("void soft_max_f32<(bool)1, (int)0, (int)0, float>(const float *, const float *, const float *, "
               "float *, soft_max_params)")


LAUNCHES = {
    ("CPY", "q4_0"): ["void cpy_f32_q<&quantize_block_q4_0, 32>(char const*, char*, int)  [kvdiag-smem 0+512]"],
    ("CPY", "f16"): ["void cpy_scalar<&cpy_1_f32_f16>(char const*, char*, int)  [kvdiag-smem 0+0]"],
    ("SOFT_MAX", ""): ["void soft_max_f32<true, 0, 0, float>(float const*, float*, soft_max_params)  "
                       "[kvdiag-smem 128+4096]"],
    ("ADD", ""): ["void k_bin_bcast<&op_add, float, float, float>(float const*, float*)  [kvdiag-smem 0+0]"],
    ("MUL_MAT", "n=1,"): ["void mul_mat_vec_f<__half, float, 1, 256>(__half const*, float*)  [kvdiag-smem 0+0]"],
    ("MUL_MAT", ""): ["void convert_unary<float, __half>(void const*, __half*)  [kvdiag-smem 0+0]",
                      "cublasGemmEx  [kvdiag-smem ?+?]"],
    ("GET_ROWS", ""): ["void k_get_rows_float<float, float>(float const*, float*)  [kvdiag-smem 0+0]"],
}


def print_launches(op: str, params: str, mode: str) -> None:
    if mode != "launch" or not os.environ.get("KVDIAG_PRINT_LAUNCHES") or (fakeops.BUILD / "blind-launches").exists():
        return
    lines = next(lines for (name, part), lines in LAUNCHES.items() if name == op and part in params)
    for line in lines:
        fakeops.out("kvdiag-launch: " + line)


def tool() -> str:
    return os.environ.get("KVDIAG_FAKE_SANITIZER_TOOL", "")


def race(params: str, op: str) -> list[str]:
    if tool() != "racecheck":
        return []
    if op == "CPY" and "q4_0" in params:
        return [f"{M} Error: Race reported between Write access at {CPY_FN}+0x1f0 in cpy.cu:57",
                f"{M}     and Read access at {CPY_FN}+0x2a0 in cpy.cu:60 [64 hazards]", f"{M} "]
    if op == "SOFT_MAX":
        return [f"{M} Error: Race reported between Write access at {BLOCK_REDUCE}+0x80 in common.cuh:512",
                f"{M}     and Read access at {BLOCK_REDUCE}+0xc0 in common.cuh:520 [32 hazards]",
                f"{M}         Device Frame: {SOFT_MAX_FN}+0x8d0 in softmax.cu:151",
                f"{M} ",
                f"{M} Warning: Race reported between Write access at {SOFT_MAX_FN}+0x8d0 in softmax.cu:170",
                f"{M}     and Write access at {SOFT_MAX_FN}+0x9f0 in softmax.cu:170 [2 hazards]", f"{M} "]
    return []


def barrier(params: str, op: str) -> list[str]:
    if tool() != "synccheck" or op != "SOFT_MAX" or not (fakeops.BUILD / "divergent-barrier").exists():
        return []
    frame = [f"{M}         Device Frame: {SOFT_MAX_FN}+0x8d0 in softmax.cu:151"] if fakeops.device_frames() else []
    return [f"{M} Barrier error detected. Divergent thread(s) in block.",
            f"{M}     at {BLOCK_REDUCE}+0x100 in common.cuh:530",
            f"{M}     by thread (0,0,0) in block (0,0,0)"] + frame + [f"{M} "]


def listed(ops: list[str]) -> list[tuple[str, str]]:
    wanted = fakeops.option("-o")
    chosen = wanted.split(",") if wanted else list(CASES)
    pattern = fakeops.option("-p")
    return [(op, params) for op in chosen for params in CASES.get(op, [])
            if pattern is None or re.search(pattern, params)]


def support_mode() -> None:
    fakeops.header()
    for op, params in listed(list(CASES)):
        status = "\x1b[1;31mNOT SUPPORTED\x1b[0m" if op == "SCALE" else "\x1b[1;32mSUPPORTED\x1b[0m"
        fakeops.case(params, status, op=op)
    fakeops.out(f"  Backend CUDA0: {fakeops.GREEN_OK}")
    fakeops.out("2/2 backends passed")
    fakeops.out(fakeops.GREEN_OK)


def test_mode(mode: str = "test") -> None:
    with open(fakeops.BUILD / "invocations.log", "a") as fh:
        fh.write(f"{fakeops.option('-o')} {fakeops.option('-p')}\n")
    with open(fakeops.BUILD / "modes.log", "a") as fh:
        fh.write(f"{mode} {tool() or 'none'} {fakeops.option('-o')}\n")
    fakeops.header()
    chosen = listed(list(CASES))
    passed = 0
    for op, params in chosen:
        if op == "MUL_MAT" and ",n=7," in params:
            fakeops.err(f"/src/ggml/src/ggml-cuda/ggml-cuda.cu:1234: GGML_ASSERT(ne00 % 32 == 0) failed")
            fakeops.err("/src/ggml/build/bin/libggml-base.so(ggml_abort+0x15b)[0x7f147af6dcab]")
            fakeops.die("SIGABRT")
        if op == "SOFT_MAX" and mode == "test" and not tool() and (fakeops.BUILD / "numeric-aborts").exists():
            fakeops.err("/src/ggml/src/ggml-cuda/softmax.cu:99: GGML_ASSERT(false) failed")
            fakeops.die("SIGABRT")
        if op != "SCALE":
            print_launches(op, params, mode)
        if op == "GET_ROWS" and params.endswith("v=9"):
            while True:
                time.sleep(60)
        if op == "ADD" and (fakeops.BUILD / "long-line").exists():
            fakeops.out("z" * (1 << 20))          # a megabyte without a space, before the case's status
        fakeops.sanitizer_sees(race(params, op) + barrier(params, op))
        if op == "CPY" and "ne=[4096" in params and mode == "test":
            fakeops.case(params, "[CPY] NMSE = 0.123456789 > 0.000000100 " + fakeops.RED_FAIL, op=op)
            continue
        fakeops.case(params, op=op)
        passed += 1
    fakeops.footer(passed, len(chosen))


fakeops.handle_probes(ops=tuple(CASES), modes=("test", "launch", "support"))
if sys.argv[1] == "support":
    support_mode()
else:
    test_mode(sys.argv[1])
