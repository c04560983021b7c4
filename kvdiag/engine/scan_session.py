"""One `kvdiag scan` invocation: target, case space, parallel run, saved JSON; the command shows it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvdiag.engine.gates import controls_gate_provider
from kvdiag.engine.scan import ScanResult, enumerate_cases, scan, scan_step
from kvdiag.engine.scan_batch import batchable
from kvdiag.engine.target import prepare_target
from kvdiag.engine.devices import select_devices
from kvdiag.errors import ScanNotRun, UsageError
from kvdiag.home import kvdiag_home
from kvdiag.proc.slots import slots_for_memory
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore


def run_scan(entry: Entry, build_dir: Path, *, jobs: int | None, op: str | None, params: str | None,
             limit: int | None, sanitizer: Path | None, devices: str | None = None,
             batch: int = 1, progress: Progress | None = None) -> ScanResult:
    if not entry.scan and not (op and params):
        raise UsageError(f"{entry.id} declares no case space: give --op and --params")
    op = op or entry.scan.op
    params = params or entry.scan.params
    progress = progress or Progress()
    home = kvdiag_home()
    run_dir = RunStore(home).create(f"scan-{entry.id}")
    target = prepare_target(build_dir, log_dir=run_dir.logs, sanitizer=sanitizer, check_staleness=False, home=home)
    from kvdiag.engine.applicability import judge_applicability

    step = entry.step(entry.scan.step) if entry.scan else entry.default_step
    judgement = judge_applicability(entry, step, target.facts())
    if judgement.verdict is not None:
        reason = f"{entry.id} cannot be scanned here: {judgement.verdict}: {judgement.reason}"
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", kind="scan", fields={
            "target": target.to_dict(), "verdict": judgement.verdict, "reason": reason}))
        raise ScanNotRun(judgement.verdict, reason)
    space = enumerate_cases(target, op, params, run_dir)
    presence = target.range_evidence(entry)
    if not space.supported:
        verdict, reason = _nothing_to_scan(entry, step, space, presence)
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", kind="scan", fields={
            "target": target.to_dict(), "verdict": verdict.value, "reason": reason, "range": presence.to_dict()}))
        raise ScanNotRun(verdict.value, f"{entry.id} has nothing to scan here: {verdict.value}: {reason}")
    chosen = select_devices(target.gpu.devices, devices)
    device = chosen[0] if chosen else target.first_device
    batched = batch != 1 and batchable(scan_step(entry))
    workers = jobs or default_workers(device, len(chosen), batched)
    running = RunRecord(entry=entry.id, status="running", kind="scan", fields={
        "target": target.to_dict(), "op": op, "params": params, "supported": len(space.supported)})
    run_dir.write_record(running)
    cases = len(space.supported[:limit] if limit else space.supported)
    progress.say(f"scanning {cases} case(s) of {op} /{params}/ with {workers} worker(s)"
                 + (f" on each of {len(chosen)} GPUs" if len(chosen) > 1 else "")
                 + (", several cases per process" if batched else ", one process per case"))
    gate_provider = controls_gate_provider(home, target, run_dir.logs)
    try:
        progress.begin("cases", cases)
        result = scan(entry, target, run_dir, space=space, workers=workers, gate_provider=gate_provider,
                      limit=limit, devices=chosen, batch=batch,
                      on_case=lambda params, attempt: progress.advance(f"{attempt.verdict.value}: {params}"))
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's cases were being collected
        run_dir.write_record(RunRecord(entry=entry.id, status="interrupted", kind="scan", fields={
            "target": target.to_dict(), "op": op, "params": params,
            "note": "interrupted twice: per-case logs are in logs/, no aggregate"}))
        raise
    finally:
        progress.end()
    result.range = presence
    data = result.to_dict()
    status = "interrupted" if result.interrupted else "finished"   # the cases it has are kept either way
    run_dir.write_record(RunRecord(entry=entry.id, status=status, kind="scan",
                                   fields={"target": target.to_dict(), "scan": data}))
    return dataclasses.replace(result, run_dir=run_dir.path)


def _nothing_to_scan(entry: Entry, step, space, presence):
    """The verdict of a case space without a supported case: refused by the backend (not-applicable),
    or empty, which the affected range judges (engine.presence)."""
    from kvdiag.engine.presence import unexercised, with_range
    from kvdiag.engine.verdict import Verdict

    if space.listed:
        return Verdict.NOT_APPLICABLE, with_range(f"all {len(space.listed)} matching case(s) are not supported by "
                                                  f"this backend", presence)
    scanned = dataclasses.replace(step, vars={**step.vars, "op": space.op, "params": space.params})
    return unexercised(entry, scanned, f"no {space.op} case matches /{space.params}/ in this build (0 cases)",
                       presence)


def default_workers(device, n_devices: int, batched: bool) -> int:
    """Workers per GPU when -j is not given: the GPU's slot pool; for batches on several
    GPUs, that many in all, shared among them.

    Batches are bounded by the host, which starts only so many CUDA processes at once,
    not by the GPUs: on two H200s, D2's 132 cases took 8.4 s with 8 workers on one GPU,
    8.4 s with 4 on each of two and 11.1 s with 8 on each (device-x2-call12.log)."""
    slots = slots_for_memory(device.total_memory_bytes if device and device.total_memory_bytes else 16 << 30)
    if batched and n_devices > 1:
        return max(1, -(-slots // n_devices))
    return slots
