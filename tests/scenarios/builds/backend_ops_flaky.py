#!/usr/bin/env python3
"""D2, flaky: diverges (like backend_ops_d2_diverges) on odd test-mode invocations of this build
(counted in <build>/invocations), prints OK on even ones."""
import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.D2_CASE])
if cases and fakeops.under_sanitizer() and fakeops.invocation_number() % 2 == 1:
    fakeops.replay_divergence()
fakeops.header()
for params in cases:
    fakeops.case(params)
fakeops.footer(len(cases), len(cases))
