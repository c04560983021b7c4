#!/usr/bin/env python3
"""A healthy build: every selected case prints OK, a clean summary, exit 0 (with or without a sanitizer)."""
import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.EARLIER_CASE, fakeops.D2_CASE])
fakeops.header()
for params in cases:
    fakeops.case(params)
fakeops.footer(len(cases), len(cases))
