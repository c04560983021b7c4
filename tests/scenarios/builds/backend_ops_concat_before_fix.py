#!/usr/bin/env python3
"""A test-backend-ops of the CONCAT era before llama.cpp 85f99dca8 (release b9584): its CONCAT cases are
type=f32 and type=i32 only (4 views x 4 dims each), so `-p type=f16` selects none and it prints
`0/0 tests passed`. The CUDA kernel of that era asserts F32; a case space with F16 cases
(`<build>/case-space.txt`, what probe D11-f16-concat-cases adds) makes the first F16 case abort
the way that kernel does (concat.cu:149, GGML_ASSERT, SIGABRT); its other cases print OK. With
`<build>/kernel-fixed` present the kernel is the fixed one and F16 cases print OK too; with
`<build>/supports-f32-only` the backend refuses them (`not supported [CUDA0]`), the seed's own fix."""
import fakeops

CASES = [f"type={t},ne_a=[11,12,13,14],ne_b_d=7,dim={dim},v={v}" for v in range(4) for dim in range(4)
         for t in ("f32", "i32")]

fakeops.handle_probes(fakeops.OPS + ("CONCAT",))
cases = fakeops.selected(fakeops.case_space(CASES))
fakeops.header()
for params in cases:
    if params.startswith("type=f16") and (fakeops.BUILD / "supports-f32-only").exists():
        fakeops.case(params, "not supported [CUDA0] ", op="CONCAT")
        continue
    if params.startswith("type=f16") and not (fakeops.BUILD / "kernel-fixed").exists():
        fakeops.err("/src/llama.cpp/ggml/src/ggml-cuda/concat.cu:149: GGML_ASSERT(src0->type == GGML_TYPE_F32) failed")
        fakeops.err("/src/llama.cpp/build/bin/libggml-base.so(ggml_abort+0x15e)[0x7f61e4415b2e]")
        fakeops.err("/src/llama.cpp/build/bin/libggml-cuda.so(+0x1a2b3c)[0x7f61e3c7c0f7]")
        fakeops.die("SIGABRT")
    fakeops.case(params, op="CONCAT")
ran = [c for c in cases if not (c.startswith("type=f16") and (fakeops.BUILD / "supports-f32-only").exists())]
fakeops.footer(len(ran), len(ran))
