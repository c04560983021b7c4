#!/usr/bin/env python3
"""A numeric failure: the case prints FAIL with its error metric, the summary fails, exit 1."""
import sys

import fakeops

fakeops.handle_probes()
cases = fakeops.selected([fakeops.D2_CASE])
fakeops.header()
for params in cases:
    fakeops.case(params, f"[FLASH_ATTN_EXT] ERR = 1.712345678 > 0.005000000 {fakeops.RED_FAIL}")
fakeops.footer(0, len(cases))
if cases:
    fakeops.out("  Failing tests:")
    for params in cases:
        fakeops.out(f"  FLASH_ATTN_EXT({params})")
sys.exit(1 if cases else 0)
