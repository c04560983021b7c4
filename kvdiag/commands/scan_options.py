"""`kvdiag scan`'s options that choose how the cases run: which program, routed or not, what is instrumented.

They live together because they answer one question, "what does the scan spend its time on"
(docs/performance.md), and together they are what `benchmarks/bench_scan.py` varies.
"""

from __future__ import annotations

import click

PROGRAM_HELP = ("auto: the launch probe's build of test-backend-ops (sanitized cases GPU-only, no CPU reference; "
                "every kernel launch listed), else the build's own, saying why. plain: the build's own.")
ROUTE_HELP = ("Route first: every case runs once without the sanitizer, its kernel launches listed; only the cases "
              "that launch one of the entry's kernels run under the sanitizer, the others are not-applicable from "
              "their launch lines. Needs the launch probe's program; --no-route sanitizes every case.")
BATCH_ORDER_HELP = ("How the sanitized cases fill their batches: dealt round robin from the listing (heavy shapes "
                    "spread out), or by-kernel: cases that launched the same kernels in the route phase together, "
                    "so each sanitized process loads and instruments fewer kernels (needs routing).")
ROUTE_JOBS_HELP = ("Processes for the route phase (default: -j). It runs no sanitizer, so more processes than "
                   "the sanitized phase's may pay where the host has the cores (docs/performance.md).")
OVERLAP_HELP = ("Routed only: sanitize each batch as soon as its cases are routed, the route phase going on "
                "meanwhile, instead of after every case is routed; the same cases are sanitized and judged the "
                "same. Off by default: on the H200 it gained nothing while both phases share the GPU's slot "
                "pool (docs/performance.md).")
INSTRUMENT_HELP = ("What the sanitizer instruments: every kernel, or only the entry's (--kernel-name kns=NAME from "
                   "its signatures' kernel regex).")


def scan_path_options(command):
    """--program, --route/--no-route, --route-jobs, --overlap/--no-overlap, --instrument and --batch-order,
    in that order in `kvdiag scan --help`; each reaches engine.scan.session.run_scan by its own name."""
    command = click.option("--batch-order", type=click.Choice(["dealt", "by-kernel"]), default="dealt",
                           show_default=True, help=BATCH_ORDER_HELP)(command)
    command = click.option("--instrument", type=click.Choice(["all", "entry"]), default="all", show_default=True,
                           help=INSTRUMENT_HELP)(command)
    command = click.option("--overlap/--no-overlap", default=False, show_default=True, help=OVERLAP_HELP)(command)
    command = click.option("--route-jobs", type=click.IntRange(1, 256), default=None, help=ROUTE_JOBS_HELP)(command)
    command = click.option("--route/--no-route", default=True, show_default=True, help=ROUTE_HELP)(command)
    return click.option("--program", type=click.Choice(["auto", "plain"]), default="auto", show_default=True,
                        help=PROGRAM_HELP)(command)
