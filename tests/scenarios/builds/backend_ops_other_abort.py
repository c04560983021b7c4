#!/usr/bin/env python3
"""A different death than D2's: the case starts (its prefix flushed, as older ggml does), then the
CUDA pool runs out of memory and ggml aborts (`CUDA error: out of memory`, ggml-cuda.cu:96). The
sanitizer sees nothing. Must never be confirmed as D2."""
import fakeops

fakeops.handle_probes()
fakeops.header()
fakeops.out(f"  FLASH_ATTN_EXT({fakeops.D2_CASE}): ", end="")
fakeops.err("CUDA error: out of memory")
fakeops.err("  current device: 0, in function alloc at /src/ggml/src/ggml-cuda/ggml-cuda.cu:431")
fakeops.err("  cuMemCreate(&handle, reserve_size, &prop, 0)")
fakeops.err("/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error")
fakeops.err("/src/ggml/build/bin/libggml-base.so(ggml_abort+0x15e)[0x7f61e4415b2e]")
fakeops.err("/src/ggml/build/bin/libggml-cuda.so(_Z15ggml_cuda_errorPKcS0_S0_iS0_+0xb7)[0x7f61e3c7c0f7]")
fakeops.err("/src/ggml/build/bin/test-backend-ops(+0x1f1a3)[0x55d0c4a1f1a3]")
fakeops.die("SIGABRT")
