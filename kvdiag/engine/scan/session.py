"""One `kvdiag scan` invocation: target, case space, parallel run, saved JSON; the command shows it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kvdiag import __version__
from kvdiag.engine.verdict.plan import adapt_entry, case_format_of
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.engine.scan.cases import CaseSpace, ScanResult, enumerate_cases, scan_step
from kvdiag.engine.scan.phases import entry_kernel_filter, run_phases, why_not_routed
from kvdiag.engine.evidence.launch_proof import family_patterns
from kvdiag.engine.scan.kernels import group_by_kernel
from kvdiag.registry.radius import radius_params, tables_for
from kvdiag.engine.scan.batch import batchable
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.workspace.build import check_build_dir
from kvdiag.engine.verdict.devices import select_devices
from kvdiag.records.scan_program import ProbeBuild, ScanProgram
from kvdiag.errors import CaseListingFailed, ScanNotRun, UsageError
from kvdiag.home import kvdiag_home
from kvdiag.proc.slots import scan_slots
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry
from kvdiag.shards import Shard, case_shard
from kvdiag.store.runs import RunStore
from kvdiag.store.scans import save_scan
from kvdiag.store.sweeps import utc_now

SCAN_FILE = "scan.json"


def shard_space(space: CaseSpace, limit: int | None, shard: Shard | None) -> tuple[CaseSpace, tuple[str, ...]]:
    """The cases this scan runs, and the whole selection they were dealt from.

    ``--limit`` takes the first N supported cases before sharding, so the shards of a
    limited scan merge into that limited scan; a case's shard is its name's
    (`kvdiag.shards.case_shard`), whatever the workers, batches or other cases."""
    selection = tuple(space.supported[:limit] if limit else space.supported)
    if shard is None:
        return space, selection
    mine = tuple(c for c in selection if case_shard(c, shard.count) == shard.index)
    return dataclasses.replace(space, supported=mine), selection


def _listed_or_stop(entry: Entry, target, op: str, params: str, run_dir, fields: dict[str, Any]) -> CaseSpace:
    """The op's case space; a program that could not list it stops the scan inconclusive, recorded."""
    try:
        return enumerate_cases(target, op, params, run_dir)
    except CaseListingFailed as exc:
        reason = f"{entry.id} cannot be scanned here: inconclusive: {exc}"
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", kind="scan", fields={
            "target": target.to_dict(), "verdict": "inconclusive", "reason": reason, **fields}))
        raise ScanNotRun("inconclusive", reason) from None


def run_scan(entry: Entry, build_dir: Path, *, jobs: int | None, op: str | None, params: str | None,
             limit: int | None, sanitizer: Path | None, devices: str | None = None,
             batch: int = 1, progress: Progress | None = None, shard: Shard | None = None,
             program: str = "auto", route: bool = True, instrument: str = "all",
             batch_order: str = "dealt", route_jobs: int | None = None, overlap: bool = False) -> ScanResult:
    if not entry.scan and not (op and params) and not entry.radius:
        raise UsageError(f"{entry.id} declares no case space: give --op and --params")
    progress = progress or Progress()
    home = kvdiag_home()
    check_build_dir(build_dir)               # before the scan's run folder is made
    run_dir = RunStore(home).create(f"scan-{entry.id}", RunRecord(entry=entry.id, status="running", kind="scan",
                                                                   fields={"op": op, "params": params}))
    target = prepare_target(build_dir, log_dir=run_dir.logs, sanitizer=sanitizer, check_staleness=False, home=home)
    entry = adapt_entry(entry, case_format_of(target))    # the cases `run` selects, in this build's format
    op, params, space_source = scan_space(entry, target, op, params)
    from kvdiag.engine.verdict.applicability import judge_applicability

    step = entry.step(entry.scan.step) if entry.scan else entry.default_step
    judgement = judge_applicability(entry, step, target.facts())
    if judgement.verdict is not None:
        reason = f"{entry.id} cannot be scanned here: {judgement.verdict}: {judgement.reason}"
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", kind="scan", fields={
            "target": target.to_dict(), "verdict": judgement.verdict, "reason": reason}))
        raise ScanNotRun(judgement.verdict, reason)
    target, program_record = choose_program(target, program, entry, progress)
    whole = _listed_or_stop(entry, target, op, params, run_dir, {"program": program_record,
                                                                  "space_source": space_source})
    presence = target.range_evidence(entry)
    if not whole.supported:
        verdict, reason = _nothing_to_scan(entry, step, whole, presence)
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", kind="scan", fields={
            "target": target.to_dict(), "verdict": verdict.value, "reason": reason, "range": presence.to_dict(),
            "program": program_record, "space_source": space_source}))
        raise ScanNotRun(verdict.value, f"{entry.id} has nothing to scan here: {verdict.value}: {reason}")
    space, selection = shard_space(whole, limit, shard)
    started_at = utc_now()
    chosen = select_devices(target.gpu.devices, devices)
    device = chosen[0] if chosen else target.first_device
    batched = batch != 1 and batchable(scan_step(entry))
    workers = jobs or default_workers(device, len(chosen), batched)
    running = RunRecord(entry=entry.id, status="running", kind="scan", fields={
        "target": target.to_dict(), "op": op, "params": params, "supported": len(space.supported),
        "shard": shard and shard.text, "shard_from": shard and shard.origin(),
        "program": program_record, "space_source": space_source})
    run_dir.write_record(running)
    cases = len(selection if shard is None else space.supported)
    if shard is not None:
        origin = f", from {shard.engine}" if shard.engine else ""
        progress.say(f"shard {shard.text}{origin}: {cases} of the {len(selection)} selected case(s)")
    progress.say(f"scanning {cases} case(s) of {op} /{params}/ with {workers} worker(s)"
                 + (f" on each of {len(chosen)} GPUs" if len(chosen) > 1 else "")
                 + (", several cases per process" if batched else ", one process per case"))
    gate_provider = controls_gate_provider(home, target, run_dir.logs)
    kernel_filter, instrument_note = instrumented(entry, instrument, progress)
    try:
        progress.begin("cases", cases)
        result = run_phases(entry, target, run_dir, space=space, workers=workers, gate_provider=gate_provider,
                            devices=chosen, batch=batch, limit=None if shard else limit,
                            not_routed=why_not_routed(entry, program_record, route), kernel_filter=kernel_filter,
                            instrument_note=instrument_note, progress=progress, batch_order=batch_order,
                            route_workers=route_jobs, overlap=overlap,
                            on_case=lambda params, attempt: progress.advance(f"{attempt.verdict.value}: {params}"))
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's cases were being collected
        run_dir.write_record(RunRecord(entry=entry.id, status="interrupted", kind="scan", fields={
            "target": target.to_dict(), "op": op, "params": params,
            "note": "interrupted twice: per-case logs are in logs/, no aggregate"}))
        raise
    finally:
        progress.end()
    result = dataclasses.replace(result, run_dir=run_dir.path, shard=shard and shard.text,
                                 shard_from=shard and shard.origin(), selection=selection if shard else (),
                                 started_at=started_at, target=target.to_dict(), range=presence,
                                 program=program_record, space_source=space_source)
    result.kernels = kernel_groups(entry, target, result)
    data = result.to_dict()
    status = "interrupted" if result.interrupted else "finished"   # the cases it has are kept either way
    run_dir.write_record(RunRecord(entry=entry.id, status=status, kind="scan",
                                   fields={"target": target.to_dict(), "scan": data}))
    save_scan(scan_document(result), run_dir.path / SCAN_FILE)
    return result


def instrumented(entry: Entry, instrument: str, progress: Progress) -> tuple[str | None, str]:
    """(the sanitizer's kernel filter or None, what the scan instruments) for ``--instrument``."""
    if instrument != "entry":
        return None, "every kernel instrumented (--instrument all)"
    kernel_filter, note = entry_kernel_filter(entry)
    progress.say(f"--instrument entry: {note}")
    return kernel_filter, note


def scan_document(result: ScanResult) -> dict:
    """The scan as its file saves it (`kvdiag.store.scans`): the aggregate with its target."""
    return {"kvdiag_version": __version__, "target": result.target, **result.to_dict()}


def _nothing_to_scan(entry: Entry, step, space, presence):
    """The verdict of a case space without a supported case, as `run` judges it (engine.verdict.presence):
    refused by the backend is not-applicable, unless the range places the tree inside (then the two
    disagree: inconclusive); empty is what the affected range allows."""
    from kvdiag.engine.verdict.presence import refused_everywhere, unexercised, unlisted

    if space.listed:
        return refused_everywhere(f"all {len(space.listed)} matching case(s) are not supported by this backend",
                                  presence)
    scanned = dataclasses.replace(step, vars={**step.vars, "op": space.op, "params": space.params})
    why = f"no {space.op} case matches /{space.params}/ in this build (0 cases)"
    if step.absent_when_unlisted:
        return unlisted(step, why, presence)
    return unexercised(entry, scanned, why, presence)


def default_workers(device, n_devices: int, batched: bool) -> int:
    """Workers per GPU when -j is not given: the GPU's slot pool; for batches on several
    GPUs, that many in all, shared among them.

    Batches are bounded by the host, which starts only so many CUDA processes at once,
    not by the GPUs: on two H200s, D2's 132 cases took 8.4 s with 8 workers on one GPU,
    8.4 s with 4 on each of two and 11.1 s with 8 on each (device-x2-call12.log)."""
    slots = scan_slots(device.total_memory_bytes if device else None)
    if batched and n_devices > 1:
        return max(1, -(-slots // n_devices))
    return slots


def scan_space(entry: Entry, target, op: str | None, params: str | None) -> tuple[str, str, str]:
    """(op, params, where they come from): --params (in the build's case format); else the radius
    recorded for this tree (or every tree) with `kvdiag registry radius`; else the entry's [scan]."""
    if params:
        params = case_format_of(target).adapt(params)
        return op or (entry.scan.op if entry.scan else ""), params, "--params"
    git = target.build.git if target.build is not None else None
    commit = git.commit if git is not None else None
    recorded = radius_params(entry.radius, commit)
    if recorded:
        tables = tables_for(entry.radius, commit)
        where = ", ".join(f"{t.get('tree') or t.get('repo')}@{str(t.get('commit'))[:12]}" for t in tables)
        return op or str(tables[0].get("op") or entry.scan.op), recorded, f"the measured radius ({where})"
    if not entry.scan:
        raise UsageError(f"{entry.id} declares no case space: give --op and --params")
    return op or entry.scan.op, entry.scan.params, "the entry's [scan]"


def choose_program(target, program: str, entry: Entry, progress: Progress) -> tuple[Any, dict]:
    """The launch probe's test-backend-ops (GPU-only launch mode for sanitized cases) unless
    `--program plain`, or when it cannot be made: then the user's, saying why. Returns the target
    to scan with and the saved record of the choice (records.scan_program, every key present)."""
    if program == "plain":
        plain = dataclasses.replace(target, probe_program=None, launch_lister=None)
        return plain, ScanProgram("plain", "--program plain").to_dict()
    if target.probe_program is None:
        return _listed_by_cupti(target, "no test-backend-ops or no kvdiag home", None, progress)
    progress.say("preparing the launch probe's test-backend-ops (one file recompiled, relinked against this "
                 "build; kept for the next scan)")
    made = target.probe_program()
    probe = ProbeBuild.from_dict(made.to_dict())
    if not made.available:
        return _listed_by_cupti(target, made.why_not, probe, progress, made.describe())
    mode = "launch mode (GPU only, no CPU reference)" if scan_step(entry).sanitizer else "test mode"
    progress.say(f"{made.describe()}; cases run in {mode}, every kernel launch listed")
    path = "launch" if scan_step(entry).sanitizer else "test+launches"
    return target, ScanProgram(path, None, probe).to_dict()


def _listed_by_cupti(target, why: str | None, probe: ProbeBuild | None, progress: Progress,
                     said: str | None = None) -> tuple[Any, dict]:
    """The build's own test-backend-ops, its launches listed by the CUPTI lister when it can be built
    (path "test+cupti": it needs no source, so it works where the probe's patch does not apply)."""
    plain = dataclasses.replace(target, probe_program=None)
    library = target.launch_lister() if target.launch_lister is not None else None
    if library is None or not library.available:
        progress.say(f"running the build's own test-backend-ops: {said or why}")
        return plain, ScanProgram("plain", why if library is None else f"{why}; {library.why_not}", probe).to_dict()
    progress.say(f"running the build's own test-backend-ops ({said or why}); every kernel launch listed by kvdiag's "
                 f"CUPTI launch lister")
    return plain, ScanProgram("test+cupti", why, probe).to_dict()


def kernel_groups(entry: Entry, target, result: ScanResult) -> dict:
    """The cases by kernel instantiation (engine.scan.kernels); the build's kernel listing is
    asked for only when launches were listed (without them nothing can be called never reached)."""
    patterns = family_patterns(entry)
    listed = any(a.evidence.launch_listing for a in result.results.values())
    compiled, listing = None, None
    if listed and target.kernel_symbols is not None:
        symbols = target.kernel_symbols()
        listing = symbols.describe()
        compiled = symbols.kernels if symbols.listed else None
    dims = entry.scan.dimensions if entry.scan else ()
    return group_by_kernel(result.results, patterns=patterns, dimensions=dims, compiled=compiled, listing=listing)
