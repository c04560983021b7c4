"""One `kvdiag drift` invocation: inspect the build, run the cases N times, judge, save."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.engine.drift.measure import DriftResult, judge_drift, run_drift
from kvdiag.engine.verdict.placement import tree_range_evidence
from kvdiag.errors import ScanNotRun, UsageError
from kvdiag.home import kvdiag_home
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunStore
from kvdiag.workspace.build import check_build_dir, inspect_build, probe_backend_ops
from kvdiag.workspace.gpu import fingerprint_gpu
from kvdiag.workspace.history import TreeHistory


@dataclass(frozen=True)
class DriftSession:
    """What `kvdiag drift` shows: the result, its verdict and why, where it was saved."""

    result: DriftResult
    verdict: str
    reason: str
    data: dict[str, Any]       # as saved in run.json (without its status)
    run_dir: Path
    seeded_note: str


def run_drift_session(entry: Entry | None, build_dir: Path, *, op: str, params: str, runs: int,
                      progress: Progress | None = None) -> DriftSession:
    if not build_dir.exists():
        raise UsageError(f"build folder does not exist: {build_dir}")
    check_build_dir(build_dir)               # before the drift's run folder is made
    progress = progress or Progress()
    running = RunRecord(entry=entry.id if entry else None, status="running", kind="drift")
    run_dir = RunStore(kvdiag_home()).create(f"drift-{entry.id if entry else op}", running)
    if not fingerprint_gpu(log_dir=run_dir.logs).available:      # drift repeats GPU cases: nothing to measure
        reason = "no CUDA GPU is visible on this machine: drift measures GPU results"
        run_dir.write_record(running.with_status("finished", verdict="skipped", reason=reason))
        raise ScanNotRun("skipped", f"{reason}\nrun: {run_dir.path}")
    build = inspect_build(build_dir, log_dir=run_dir.logs, check_staleness=False)
    binary = build.binary("test-backend-ops")
    if binary is None:
        raise UsageError(f"no test-backend-ops in {build_dir}")
    info = probe_backend_ops(binary, log_dir=run_dir.logs)
    params = info.case_format.adapt(params)     # the same cases `run` selects, in this build's case format
    criterion = entry.drift if entry else None
    seeds = criterion.seeds if criterion else ()
    result = run_drift(binary, run_dir, op=op, params=params, runs=runs, seeds=seeds, has_seed=info.has_seed,
                       progress=progress)
    presence = None
    if entry is not None:
        git = build.git
        presence = tree_range_evidence(entry, TreeHistory(build.source_dir, run_dir.logs), dirty=bool(git and git.dirty))
    verdict, reason = judge_drift(result, criterion, _absent(entry, op, params, presence) if entry else None)
    data = {"entry": entry.id if entry else None, "verdict": verdict, "reason": reason, "build": build.to_dict(),
            "drift": result.to_dict(), **({"range": presence.to_dict()} if presence is not None else {})}
    run_dir.write_record(running.with_status("finished", **{k: v for k, v in data.items() if k != "entry"}))
    return DriftSession(result, verdict, reason, data, run_dir.path, _seed_note(info, seeds))


def _absent(entry: Entry, op: str, params: str, presence):
    """"No case matched", judged by the entry's affected range (engine.verdict.presence)."""
    from dataclasses import replace

    from kvdiag.engine.verdict.presence import unexercised

    step = replace(entry.default_step, vars={"op": op, "params": params}, exercise_probe=None)

    def judged(why: str) -> tuple[str, str]:
        verdict, reason = unexercised(entry, step, why, presence)
        return verdict.value, reason
    return judged


def _seed_note(info, seeds) -> str:
    if info.has_seed:
        return f"this test-backend-ops takes --seed: {len(seeds) or 'no'} seed(s) given"
    return "this test-backend-ops has no --seed: every run draws new random inputs"
