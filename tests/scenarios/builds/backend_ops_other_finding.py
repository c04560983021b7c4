#!/usr/bin/env python3
"""The sanitizer finds a divergent barrier, but in another kernel (the vector FA kernel,
fattn-vec.cuh:211), not D2's; the case still prints OK and the program exits 0."""
import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.D2_CASE])
finding = [
    "========= Barrier error detected. Divergent thread(s) in block.",
    "=========     at void flash_attn_ext_vec<(int)256, (int)1, (ggml_type)1, (ggml_type)1, (bool)0>"
    "(const char *, const char *)+0x2a10 in fattn-vec.cuh:211",
    "=========     by thread (0,0,0) in block (3,0,0)",
    "========= ",
]
fakeops.sanitizer_sees(finding * 4 + ["========= ERROR SUMMARY: 4 errors"])
fakeops.header()
for params in cases:
    fakeops.case(params)
fakeops.footer(len(cases), len(cases))
