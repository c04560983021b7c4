#!/usr/bin/env python3
"""A test-backend-ops whose walk of FLASH_ATTN_EXT hsk=320 cases dies in one case, for case attribution.

The cases are DEFAULT_CASES below (or the lines of `<build>/case-space.txt`); type_K=q5_1
is not supported. `<build>/dies-at.txt` names the dying cases, one `params<TAB>mode` a line:

    ggml-abort   `…/fattn.cu:380: fatal error`, a backtrace, SIGABRT (D1 on BeeLlama)
    segv         SIGSEGV, nothing printed
    sanitizer    under the sanitizer: barrier findings handed to it, then the process ends
                 at once (the tool's destroy-on-device-error: exit 99, no case line); bare: OK
    walk-only    ggml-abort, but only in a walk of several cases (state left by earlier ones):
                 alone the case prints OK

As current ggml, a case's line is printed only after it ran, so a death leaves the last
finished case as the only clue. `support` mode lists the cases (no kernel runs). Every
test-mode process appends its `-p` pattern to `<build>/invocations.log`.
"""
import os
import re
import sys

import fakeops

TEMPLATE = ("hsk=320,hsv=256,nh=4,nr23=[{nr}],kv=512,nb={nb},mask=0,sinks=0,max_bias=0.000000,"
            "logit_softcap=0.000000,prec=f32,type_K={t},type_V={t},permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
DEFAULT_CASES = [TEMPLATE.format(nr=nr, nb=nb, t=t) for nr, nb, t in (
    ("1,1", 1, "f16"), ("1,1", 3, "q5_1"), ("1,1", 32, "f16"), ("4,1", 32, "f16"),
    ("4,1", 75, "f16"), ("4,1", 75, "q5_1"), ("32,1", 1, "f16"), ("32,1", 3, "f16"))]
SUPPORTED = "\x1b[1;32mSUPPORTED\x1b[0m"
NOT_SUPPORTED = "\x1b[1;31mNOT SUPPORTED\x1b[0m"
M = fakeops.MARKER


def cases() -> list[str]:
    return fakeops.case_space(DEFAULT_CASES)


def dying() -> dict[str, str]:
    table = fakeops.BUILD / "dies-at.txt"
    if not table.is_file():
        return {}
    return dict(line.split("\t", 1) for line in table.read_text().splitlines() if "\t" in line)


def supported(params: str) -> bool:
    return "type_K=q5_1" not in params


def abort_in_launcher() -> None:
    fakeops.err("/src/llama.cpp/ggml/src/ggml-cuda/fattn.cu:380: fatal error")
    fakeops.err("/src/llama.cpp/build/bin/libggml-base.so(ggml_print_backtrace+0x21c)[0x7f147af6dacc]")
    fakeops.err("/src/llama.cpp/build/bin/libggml-base.so(ggml_abort+0x15b)[0x7f147af6dcab]")
    fakeops.err("/src/llama.cpp/build/bin/libggml-cuda.so(+0x1f2a3c)[0x7f1475b2fa3c]")
    fakeops.die("SIGABRT")


def barrier_findings() -> list[str]:
    site = "fattn-mma-f16.cuh:1607" if fakeops.lineinfo() else "fattn-mma-f16.cuh"
    lines = []
    for thread in range(2):
        lines += [f"{M} Barrier error detected. Divergent thread(s) in block.",
                  f"{M}     at void flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, "
                  f"(bool)0, (bool)0, (bool)0, (bool)1>(const float2 *)+0x15b50 in {site}",
                  f"{M}     by thread ({thread},0,0) in block (52,0,0)", f"{M} "]
    return lines + [f"{M} Error: process didn't terminate successfully",
                    f"{M} Target application returned an error", f"{M} ERROR SUMMARY: 2048 errors",
                    f"{M} ERROR SUMMARY: 2046 errors were not printed. "
                    "Use --print-limit option to adjust the number of printed errors"]


def log_invocation() -> None:
    with open(fakeops.BUILD / "invocations.log", "a") as f:
        f.write((fakeops.option("-p") or "") + "\n")


fakeops.handle_probes()
fakeops.header()
selected = fakeops.selected(cases())
if sys.argv[1] == "support":
    for params in selected:
        fakeops.case(params, SUPPORTED if supported(params) else NOT_SUPPORTED)
    fakeops.footer(len(selected), len(selected))
    sys.exit(0)
log_invocation()
deaths = dying()
for params in selected:
    if not supported(params):
        fakeops.case(params, "not supported [CUDA0] ")
        continue
    mode = deaths.get(params)
    if mode == "ggml-abort" or (mode == "walk-only" and len(selected) > 1):
        abort_in_launcher()
    elif mode == "segv":
        fakeops.die("SIGSEGV")
    elif mode == "sanitizer" and fakeops.under_sanitizer():
        fakeops.sanitizer_sees(barrier_findings())
        sys.stdout.flush()
        os._exit(0)
    fakeops.case(params)
fakeops.footer(len(selected), len(selected))
