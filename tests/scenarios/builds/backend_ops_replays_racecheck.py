#!/usr/bin/env python3
"""A test-backend-ops that replays a racecheck run written in the recorded transcripts' format.

The run is `<build>/replay.log` (a test copies one of tests/fixtures/sanitizer/
racecheck-block-reduce-*.log there): its `=========` lines, banner excepted, are handed
to the sanitizer (the hazards and racecheck's own summary), its `kvdiag-launch:` lines
are printed only when KVDIAG_PRINT_LAUNCHES is set (as the launch probe's program prints
them), ggml's init lines go to stderr and the rest to stdout. Every test-mode `-p` is
appended to `<build>/invocations.log`.
"""
import os

import fakeops

fakeops.handle_probes()
with open(fakeops.BUILD / "invocations.log", "a") as log:
    log.write((fakeops.option("-p") or "") + "\n")
recorded = (fakeops.BUILD / "replay.log").read_text().splitlines()
banner = f"{fakeops.MARKER} COMPUTE-SANITIZER"
fakeops.sanitizer_sees([line for line in recorded if line.startswith(fakeops.MARKER) and line != banner])
for line in recorded:
    if line.startswith(fakeops.MARKER):
        continue
    if line.startswith("kvdiag-launch: ") and not os.environ.get("KVDIAG_PRINT_LAUNCHES"):
        continue
    (fakeops.err if line.startswith(("ggml_cuda_init", "  Device 0:")) else fakeops.out)(line)
