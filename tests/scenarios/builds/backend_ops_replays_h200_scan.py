#!/usr/bin/env python3
"""A test-backend-ops that replays, case by case, what the H200 recorded in D2's whole-op scan.

The cases and what each did come from `<build>/replay.json`, which a test writes from the
recorded scan (tests/fixtures/device/h200-session5/scan-D2-hsk-upstream-749f688fc.json.gz):

    {"<params>": {"launches": ["<kernel as the launch probe prints it>", ...],
                  "findings": ["<instantiation as compute-sanitizer prints it>", ...]}, ...}

A case may also say how long it takes, ``"bare_s"`` and ``"sanitized_s"`` (default 0): the case sleeps
that long before printing, standing for its kernels' time on the GPU (benchmarks/bench_judging_turns.py).

`support` lists every case SUPPORTED. `test` and `launch` run the cases `-p` selects: with
KVDIAG_PRINT_LAUNCHES set a case first prints its `kvdiag-launch:` lines; under the fake
compute-sanitizer a case with findings hands the tool one barrier-divergence record per
instantiation (at fattn-mma-f16.cuh:1538, the line the H200 printed) and, when the tool
ends the whole context (a case run alone), dies as the recorded process did. Every case
prints OK, as every one of them did on the H200. A case run under the sanitizer is appended
to `<build>/sanitized.log`.
"""
import json
import os
import sys
import time

import fakeops

M = fakeops.MARKER


def replay() -> dict:
    return json.loads((fakeops.BUILD / "replay.json").read_text())


def support_mode(cases: dict) -> None:
    fakeops.header()
    for params in fakeops.selected(list(cases)):
        fakeops.case(params, "\x1b[1;32mSUPPORTED\x1b[0m")
    fakeops.out(f"  Backend CUDA0: {fakeops.GREEN_OK}")
    fakeops.out("Backend 2/2: CPU")
    fakeops.out("  Skipping CPU backend")
    fakeops.out("2/2 backends passed")
    fakeops.out(fakeops.GREEN_OK)


def diverge(findings: list[str]) -> None:
    lines = []
    for inst in findings:
        lines += [f"{M} Barrier error detected. Divergent thread(s) in block.",
                  f"{M}     at void {inst}(const float2 *, const __half2 *)+0x15b50 in fattn-mma-f16.cuh:1538",
                  f"{M}     by thread (0,0,0) in block (0,0,0)",
                  f"{M} "]
    if not fakeops.streamed_report():
        lines.append(f"{M} ERROR SUMMARY: {len(findings)} error{'s' if len(findings) != 1 else ''}")
    fakeops.sanitizer_sees(lines)
    if fakeops.destroy_on_device_error() != "kernel":
        fakeops.err("CUDA error: unspecified launch failure")
        fakeops.err("/src/ggml/src/ggml-cuda/ggml-cuda.cu:106: CUDA error")
        fakeops.die("SIGABRT")


def run_mode(cases: dict) -> None:
    fakeops.header()
    selected = fakeops.selected(list(cases))
    for params in selected:
        case = cases[params]
        if fakeops.under_sanitizer():
            with open(fakeops.BUILD / "sanitized.log", "a") as fh:
                fh.write(params + "\n")
        time.sleep(case.get("sanitized_s" if fakeops.under_sanitizer() else "bare_s", 0))
        if os.environ.get("KVDIAG_PRINT_LAUNCHES"):
            for launch in case["launches"]:
                fakeops.out("kvdiag-launch: " + launch)
        if case["findings"] and fakeops.under_sanitizer():
            diverge(case["findings"])
        fakeops.case(params)
    fakeops.footer(len(selected), len(selected))


fakeops.handle_probes(modes=("test", "perf", "grad", "support", "launch"))
if sys.argv[1] == "support":
    support_mode(replay())
else:
    run_mode(replay())
