#!/usr/bin/env python3
"""The selected case exists but the CUDA backend does not support it: `not supported [CUDA0]`, exit 0."""
import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.D2_CASE])
fakeops.header()
for params in cases:
    fakeops.case(params, "not supported [CUDA0] ")
fakeops.footer(len(cases), len(cases))
