#!/usr/bin/env python3
"""test-backend-ops of ggml d99724f2 on an H200, for D2's case.

Under compute-sanitizer synccheck the MMA kernel's divergent barrier is seen
(2048 errors at fattn-mma-f16.cuh:1538, or at bare offsets in a build without
-lineinfo) and the process aborts with `CUDA error: unspecified launch failure`,
as recorded in tests/fixtures/transcripts/synccheck-single-case.log. Without a
sanitizer the case prints OK: the defect is invisible to the numeric test.
"""
import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.D2_CASE])
if cases and fakeops.under_sanitizer():
    fakeops.replay_divergence()
fakeops.header()
for params in cases:
    fakeops.case(params)
fakeops.footer(len(cases), len(cases))
