#!/usr/bin/env python3
"""test-backend-ops of a tree from before ggml 6976b270 (2026-05-01), such as release v0.9.7.

Its FLASH_ATTN_EXT case names the cache type once, as that era's
`VARS_TO_STR13(hsk, hsv, nh, nr23, kv, nb, mask, sinks, max_bias, logit_softcap, prec,
type_KV, permute)` prints it, and ends at permute (no kv_view). The cases are
DEFAULT_CASES below (v0.9.7's own strings for those shapes), or the lines of
`<build>/case-space.txt`. Under the sanitizer, D2's case (hsk=256, nr23=[4,1], kv=512,
nb=3, f16) diverges as recorded on d99724f2 (the barrier is older than this era: ggml
38648430, 2025-05-13) and the process aborts; every other case prints OK. `support` mode
lists the selected cases SUPPORTED. Every test-mode `-p` is appended to
`<build>/invocations.log`.
"""
import sys

import fakeops

TEMPLATE = ("hsk={hsk},hsv={hsk},nh=4,nr23=[{nr}],kv=512,nb={nb},mask=1,sinks=0,max_bias=0.000000,"
            "logit_softcap={softcap},prec=f32,type_KV={t},permute=[0,1,2,3]")


def case_params(hsk: int, nr: str, nb: int, t: str = "f16", softcap: str = "0.000000") -> str:
    return TEMPLATE.format(hsk=hsk, nr=nr, nb=nb, t=t, softcap=softcap)


D2_SHAPE = case_params(256, "4,1", 3)
DEFAULT_CASES = [
    case_params(128, "1,1", 1),
    case_params(128, "1,1", 1, softcap="10.000000"),
    case_params(256, "1,1", 3),
    D2_SHAPE,
    case_params(256, "4,1", 32),
    case_params(256, "4,1", 3, "q8_0"),
]
SUPPORTED = "\x1b[1;32mSUPPORTED\x1b[0m"

fakeops.handle_probes()
selected = fakeops.selected(fakeops.case_space(DEFAULT_CASES))
if sys.argv[1] == "support":
    fakeops.header()
    for params in selected:
        fakeops.case(params, SUPPORTED)
    fakeops.out(f"  Backend CUDA0: {fakeops.GREEN_OK}")
    fakeops.out("Backend 2/2: CPU")
    fakeops.out("  Skipping CPU backend")
    fakeops.out("2/2 backends passed")
    fakeops.out(fakeops.GREEN_OK)
    sys.exit(0)
with open(fakeops.BUILD / "invocations.log", "a") as log:
    log.write((fakeops.option("-p") or "") + "\n")
if D2_SHAPE in selected and fakeops.under_sanitizer():
    fakeops.replay_divergence()
fakeops.header()
for params in selected:
    fakeops.case(params)
fakeops.footer(len(selected), len(selected))
