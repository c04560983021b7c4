"""A scan in two phases: route every case bare, then sanitize the cases that reach the entry's kernels.

Phase "route" (engine.scan.route) runs every case once in the launch probe's launch mode
without a sanitizer and reads which kernels each launched; a case that launched none of the
entry's kernels gets there the verdict a scan without routing gives it (not-applicable for
that case, naming what it launched), without being sanitized. Phase "detect" (engine.scan.cases)
sanitizes the rest exactly as a scan without routing does: same batches, same attribution of
findings to cases, launch lines still printed, so every verdict keeps its launch proof.

Why the affected set cannot change: which kernels a case launches is decided by host code
from the case's shapes and types and the GPU, identically in both phases (the sanitizer does
not change a shape or the device), and the entry's kernels for routing are its family (its
sanitizer signatures' kernel regexes, e.g. ``^flash_attn_ext_f16``), never the radius' exact
instantiations, so a case that reaches a new instantiation of the family is still sanitized.
A case is confirmed only by a finding in a kernel of that family, so a case that launches
none cannot be confirmed. The detect phase prints launches again, and a case whose detect
launches differ from its route launches is listed (``launch_changes``). What routing gives up:
findings of *other* defects in kernels outside the entry's family are not looked for in the
cases that do not reach it (a scan without routing would make such a case inconclusive).

Routing needs a listing of launches (the launch probe's program, or where its patch does not
apply the build's own in test mode under kvdiag's CUPTI launch lister), a sanitizer step (routing only
spares sanitizing), kernel regexes in the entry's signatures, and a step that runs several
cases per process; without one of them the scan runs unrouted and says why in one line.

The route phase also says which kernels each case launches, which ``--batch-order by-kernel``
uses: the detect phase's batches then hold cases that launched the same kernels, so each
sanitized process loads and instruments fewer of them (compute-sanitizer patches every kernel
a process loads); the default deals the cases round robin, which spreads the heavy shapes.

The phases run one after the other, or overlapped (engine.scan.overlap): the detect phase then
sanitizes each batch as soon as its cases are routed, the route phase going on in a thread, so the
scan's wall tends to the longer phase rather than their sum. Which cases are sanitized, and how each
is judged, is the same either way.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
import time
from typing import Any, Callable, Sequence

from kvdiag.controls.gate import GateProvider
from kvdiag.engine.evidence.launch_proof import family_patterns
from kvdiag.engine.scan.cases import CaseSpace, ScanResult, scan, scan_step
from kvdiag.engine.scan.batch import batchable
from kvdiag.engine.scan.overlap import PhasesRun, run_overlapped
from kvdiag.engine.scan.route import RouteOutcome, route
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt
from kvdiag.progress import Progress
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir

ROUTED, DIRECT = "routed", "direct"
BY_KERNEL = "by-kernel"
_PLAIN_NAME = re.compile(r"^\^?(?:\\b)?([A-Za-z_][A-Za-z0-9_]*)$")
SHOW_CHANGES = 20    # launch changes kept in the record (all are counted)


def why_not_routed(entry: Entry, program: dict[str, Any] | None, wanted: bool) -> str | None:
    """None when the scan can route; else why not, in one clause."""
    step = scan_step(entry)
    if not wanted:
        return "--no-route"
    if not step.sanitizer:
        return f"{entry.id}'s scan step runs no sanitizer (routing only spares sanitizing)"
    if not family_patterns(entry):
        return f"{entry.id}'s sanitizer signatures name no kernel to route cases to"
    if not program or program.get("path") not in ("launch", "test+cupti"):
        why = (program or {}).get("why") or "no launch probe"
        return f"the build's own test-backend-ops lists no kernel launches ({why})"
    if not batchable(step):
        return f"{entry.id}'s scan step cannot run several cases per process"
    return None


def entry_kernel_filter(entry: Entry) -> tuple[str | None, str]:
    """The ``--kernel-name kns=`` value that instruments only the entry's kernels, and what it rests on.

    kns= matches a substring of the **mangled** name: ``flash_attn_ext_f16`` is inside
    ``_Z18flash_attn_ext_f16ILi256ELi256E…``, so a family regex that is a plain identifier
    (optionally anchored with ``^``) gives its filter; anything else cannot be turned into one."""
    step = scan_step(entry)
    if step.kernel_filter:
        return step.kernel_filter, f"the entry's own kernel_filter ({step.kernel_filter})"
    patterns = family_patterns(entry)
    names = {m.group(1) if (m := _PLAIN_NAME.match(p)) else None for p in patterns}
    if len(names) != 1 or None in names:
        shown = ", ".join(f"/{p}/" for p in patterns) or "none"
        return None, f"every kernel instrumented: the entry's kernel regexes ({shown}) are not one plain name"
    name = names.pop()
    return name, f"only kernels whose mangled name contains {name} instrumented (from /{patterns[0]}/)"


def run_phases(entry: Entry, target: Target, run_dir: RunDir, *, space: CaseSpace, workers: int,
               gate_provider: GateProvider, devices: Sequence[Any], batch: int, limit: int | None,
               not_routed: str | None, kernel_filter: str | None, instrument_note: str,
               on_case: Callable[[str, Attempt], None] | None = None, progress: Progress | None = None,
               batch_order: str = "dealt", route_workers: int | None = None, overlap: bool = False) -> ScanResult:
    """The scan of ``space``: routed unless ``not_routed`` says why not (then as before, every case
    sanitized). ``kernel_filter``: the detect phase instruments only those kernels. ``batch_order``
    "by-kernel" (routed only): the detect phase's batches hold cases that launched the same kernels.
    ``route_workers``: processes per device for the route phase (default ``workers``). ``overlap``
    (routed only): the detect phase starts on the first routed cases while the rest are routed
    (engine.scan.overlap); the same cases are sanitized and the record is the same, with each phase's
    own wall."""
    progress = progress or Progress()
    common = dict(workers=workers, gate_provider=gate_provider, devices=devices, batch=batch,
                  kernel_filter=kernel_filter, on_case=on_case)
    record = {"path": DIRECT if not_routed else ROUTED, "why": not_routed, "route": None,
              "kernel_filter": kernel_filter, "instrument": instrument_note, "launch_changes": [],
              "launch_changed": 0, "batch_order": batch_order if not not_routed else "dealt",
              "route_workers": None if not_routed else (route_workers or workers),
              "overlap": bool(overlap and not not_routed)}
    cases = tuple(space.supported[:limit] if limit else space.supported)
    if not_routed is not None:
        progress.say(_not_routed_note(entry, not_routed, batch_order))
        result = scan(entry, target, run_dir, space=space, limit=limit, **common)
        result.phases = {**record, "detect": _phase(len(cases), result.processes, result.wall_s)}
        return result
    started, cpu_started = time.monotonic(), time.process_time()
    phases = dict(space=space, cases=cases, route_workers=route_workers or workers, by_kernel=batch_order == BY_KERNEL,
                  **common)
    if overlap:
        progress.say(f"route: {len(cases)} case(s) in launch mode without the sanitizer, their kernel launches "
                     f"listed; detect: each batch under the sanitizer as soon as its cases are routed (--overlap)")
        said = functools.partial(_say_routed, progress, entry)
        done = run_overlapped(entry, target, run_dir, **phases, when_routed=said)
    else:
        done = _one_after_the_other(entry, target, run_dir, progress=progress, **phases)
    routed, result = done.routed, done.result
    detect_phase = _phase(done.detected, result.processes, done.detect_wall_s)
    changes = launch_changes(routed.launched, result.results)
    lister = "launch probe" if target.probe_program is not None else "CUPTI injection"
    result.results = {**routed.routed, **with_route_launches(result.results, routed.launched, lister)}
    result.space = space
    result.processes += routed.processes
    result.interrupted = result.interrupted or routed.interrupted
    result.phases = {**record, "route": routed.to_dict(), "detect": detect_phase,
                     "launch_changes": changes[:SHOW_CHANGES], "launch_changed": len(changes)}
    result.wall_s = time.monotonic() - started
    result.cpu_started = cpu_started     # harness_cpu_s counts both phases, as wall_s does
    return result


def _one_after_the_other(entry: Entry, target: Target, run_dir: RunDir, *, space: CaseSpace, cases: Sequence[str],
                         route_workers: int, by_kernel: bool, progress: Progress, **common: Any) -> PhasesRun:
    """The route phase over every case, then the detect phase over those it hands over."""
    cancel = threading.Event()
    progress.say(f"route: {len(cases)} case(s) in launch mode without the sanitizer, their kernel launches listed")
    routed = route(entry, scan_step(entry), target, run_dir, cases=cases, workers=route_workers,
                   devices=common["devices"], gate_provider=common["gate_provider"], cancel=cancel,
                   on_case=common["on_case"])
    detect = routed.to_detect(cases) if not routed.interrupted else ()
    _say_routed(progress, entry, routed, len(detect))
    if by_kernel:
        detect = tuple(sorted(detect, key=lambda case: sorted(routed.launched.get(case, ()))))   # stable
    result = scan(entry, target, run_dir, space=dataclasses.replace(space, supported=detect),
                  alone=routed.alone(), in_order=by_kernel, **common)
    return PhasesRun(routed, result, len(detect), result.wall_s)


def _say_routed(progress: Progress, entry: Entry, routed: RouteOutcome, detect: int) -> None:
    if routed.start_failure():
        progress.say(f"route: {routed.start_failure()}")
    if not routed.interrupted:
        progress.say(routed.summary(entry.id, detect))


def _not_routed_note(entry: Entry, why: str, batch_order: str) -> str:
    note = f"not routed: {why}"
    if scan_step(entry).sanitizer:
        note += "; every case runs under the sanitizer"
    if batch_order == BY_KERNEL:
        note += "; batches dealt (--batch-order by-kernel needs the route phase's launches)"
    return note


def _phase(cases: int, processes: int, wall_s: float) -> dict[str, Any]:
    return {"cases": cases, "processes": processes, "wall_s": round(wall_s, 3)}


def with_route_launches(results: dict[str, Attempt], route_launched: dict[str, tuple[str, ...]],
                        lister: str) -> dict[str, Attempt]:
    """Each sanitized case that listed no launches of its own (the CUPTI lister cannot subscribe beside
    compute-sanitizer: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, measured on an H100) named by what
    the route phase saw it launch, saying so: the verdict still names its instantiations."""
    out = dict(results)
    for params, attempt in results.items():
        launched = route_launched.get(params)
        if launched and not attempt.evidence.launch_listing:
            evidence = dataclasses.replace(attempt.evidence, launched=launched,
                                           launch_listing=f"{lister} (route phase, without the sanitizer)")
            out[params] = dataclasses.replace(attempt, evidence=evidence)
    return out


def launch_changes(route_launched: dict[str, tuple[str, ...]], results: dict[str, Attempt]) -> list[dict[str, Any]]:
    """The detect-phase cases whose launches differ from what the route phase saw them launch.

    Routing rests on a case launching the same kernels with and without the sanitizer; a case that
    launched a kernel only under the sanitizer would show that it does not hold. A case that launched
    fewer (its sanitized process ended at a finding, before its later kernels) is listed too."""
    out = []
    for params, attempt in sorted(results.items()):
        before = route_launched.get(params)
        if before is None or not attempt.evidence.launch_listing:
            continue
        after = attempt.evidence.launched
        if set(after) != set(before):
            out.append({"case": params, "only_detect": [k for k in after if k not in before],
                        "only_route": [k for k in before if k not in after]})
    return out
