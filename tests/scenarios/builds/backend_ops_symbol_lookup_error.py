#!/usr/bin/env python3
"""A build whose test-backend-ops answers --help and --list-ops but dies in every mode that
initialises CUDA, as the dynamic loader makes it die when libggml-cuda.so does not list the driver
library at all (seen on an H200 with a library linked on a host without a driver, against a stub
libcuda that defined none of the driver's functions, so the linker dropped it): `symbol lookup
error: … undefined symbol: cuDeviceGet`, exit 127, no case listed."""
import sys

import fakeops

fakeops.handle_probes()
print("ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143155 MiB):", file=sys.stderr, flush=True)
print(f"{sys.argv[0]}: symbol lookup error: {fakeops.BIN}/libggml-cuda.so.0: undefined symbol: cuDeviceGet",
      file=sys.stderr, flush=True)
sys.exit(127)
