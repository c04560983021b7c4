#!/usr/bin/env python3
"""Current ggml over several cases: the first prints `not supported [CUDA0]`, the next one runs out of
CUDA memory and aborts inside its compute, so (printing a case only after it ran) its line never comes."""
import fakeops

fakeops.handle_probes()
fakeops.header()
fakeops.case(fakeops.EARLIER_CASE, "not supported [CUDA0] ")
fakeops.err("CUDA error: out of memory")
fakeops.err("  current device: 0, in function alloc at /src/ggml/src/ggml-cuda/ggml-cuda.cu:431")
fakeops.err("  cuMemCreate(&handle, reserve_size, &prop, 0)")
fakeops.err("/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error")
fakeops.die("SIGABRT")
