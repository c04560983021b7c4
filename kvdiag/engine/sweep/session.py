"""One `kvdiag sweep`: every selected entry against one build, the target prepared once.

GPU entries (`requires.gpu`) run one after another in the calling thread — each
already takes a slot of the GPU pool inside `run_entry`, and one sanitized
kernel at a time keeps their timings and findings readable — while CPU-only
entries (build checks, throw probes) run beside them in one worker thread.
The calling thread is the one that receives Ctrl-C; it then cancels the worker,
waits until it has ended (kvdiag.proc.threads: never inside ``Thread.join``) and
the sweep keeps every outcome that finished.

Sharding: the selection is put in natural id order (D2 before D10) and dealt
out **round-robin**: shard i of n gets the entries at positions i-1, i-1+n,
i-1+2n, … So shards 1..n cover every entry exactly once, and neighbouring
entries (often of one family and cost) land on different shards.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from kvdiag import __version__
from kvdiag.engine.verdict.devices import describe
from kvdiag.controls.gate import GateProvider
from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.errors import RunInterrupted
from kvdiag.engine.verdict.ranges import look_up_commits
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.workspace.build import check_build_dir
from kvdiag.records.verdict import Outcome, Verdict, combined_exit_code
from kvdiag.errors import KvdiagError, UsageError
from kvdiag.home import kvdiag_home
from kvdiag.proc.threads import Worker, wait_all
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir, RunStore
from kvdiag.store.sweeps import (Sweep, check_sweep_path, entry_sort_key, save_sweep, shard_ids, sweep_outcome,
                                 utc_now, with_sources)

SWEEP_FILE = "sweep.json"


# --------------------------------------------------------------------------- selection


def _split_ids(values: Iterable[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or ():
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def select_entries(entries: Sequence[Entry], only: Iterable[str] | None = None,
                   exclude: Iterable[str] | None = None) -> list[Entry]:
    """Entries in natural id order, limited to `only` (if given) and without `exclude`.

    Both take ids or comma-separated lists of ids, case-insensitive; an id the
    registry does not have is a UsageError (a typo must not silently shrink a sweep).
    """
    by_id = {e.id.upper(): e for e in entries}
    wanted, unwanted = _split_ids(only), _split_ids(exclude)
    unknown = [i for i in wanted + unwanted if i.upper() not in by_id]
    if unknown:
        raise UsageError(f"no such defect(s) in the registry: {', '.join(unknown)}")
    chosen = [by_id[i.upper()] for i in dict.fromkeys(x.upper() for x in wanted)] if wanted else list(entries)
    skip = {i.upper() for i in unwanted}
    return sorted((e for e in chosen if e.id.upper() not in skip), key=lambda e: entry_sort_key(e.id))


def shard_entries(entries: Sequence[Entry], shard: str | None) -> list[Entry]:
    """Shard ``"i/n"`` of `entries` (round-robin over natural id order, see `shard_ids`); all for None."""
    by_id = {e.id: e for e in entries}
    return [by_id[i] for i in shard_ids(list(by_id), shard)]


def needs_gpu(entry: Entry) -> bool:
    return entry.requires.gpu


# --------------------------------------------------------------------------- running


@dataclass
class EntryResult:
    entry: Entry
    outcome: Outcome
    run_dir: RunDir
    device: Mapping[str, Any] | None = None   # the GPU its worker was pinned to (`describe()`)


@dataclass
class SweepRun:
    """What `execute_entries` returns: results in natural id order, and whether Ctrl-C cut it short."""

    results: list[EntryResult] = field(default_factory=list)
    interrupted: bool = False


Announce = Callable[[EntryResult], None]


def _locked(provider: GateProvider) -> GateProvider:
    """The controls gate memoises per tool; two threads must not both run a tool's canaries."""
    lock = threading.Lock()

    def gate(tool):
        with lock:
            return provider(tool)

    return gate


def _harness_failure(entry: Entry, run_dir: RunDir, exc: BaseException, started: float) -> Outcome:
    outcome = Outcome(entry.id, Verdict.ERROR, f"kvdiag failed while running {entry.id}: {type(exc).__name__}: {exc}",
                      duration_s=time.monotonic() - started)
    try:
        run_dir.write_record(RunRecord(entry=entry.id, status="finished", outcome=outcome,
                                       fields={"kvdiag_version": __version__}))
    except OSError:
        pass
    return outcome


# size: the GPU queue, the CPU-only thread and Ctrl-C share one loop's state (#18.1 moves its printing).
def execute_entries(entries: Sequence[Entry], target: Any, store: RunStore, gate_provider: GateProvider, *,
                    options: RunOptions | None = None, progress: Progress | None = None,
                    announce: Announce | None = None, devices: Sequence[Any] = ()) -> SweepRun:
    """Run every entry once: GPU entries one by one per GPU, CPU-only entries beside them in a thread.

    With several `devices`, one worker per device takes GPU entries from a shared
    queue, each pinned to its device (CUDA_VISIBLE_DEVICES, its own slot pool), and
    every outcome names the device it ran on. With one, GPU entries run here,
    pinned to it (so `--devices 1` means GPU 1); with none (no GPU could be
    listed), here and unpinned. `progress` counts the entries; each worker reports its
    running step on a lane of its own.
    """
    base = options or RunOptions()
    progress = progress or Progress()
    gate = _locked(gate_provider)
    cancel = threading.Event()
    gpu = [e for e in entries if needs_gpu(e)]
    cpu = [e for e in entries if not needs_gpu(e)]
    results: list[EntryResult] = []
    lock = threading.Lock()
    state = {"interrupted": False}

    def one(entry: Entry, progress: Progress, device: Any = None) -> bool:
        """Run one entry, keep its result; False when it was interrupted (stop the queue)."""
        run_dir = store.create(entry.id)
        opts = dataclasses.replace(base, progress=progress, cancel=cancel, device=device)
        started = time.monotonic()
        go_on = True
        try:
            outcome = run_entry(entry, target, run_dir, options=opts, gate_provider=gate)
        except RunInterrupted as exc:
            outcome, go_on = exc.outcome, False
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # one entry's harness failure is its verdict, never the sweep's end
            outcome = _harness_failure(entry, run_dir, exc, started)
        result = EntryResult(entry, outcome, run_dir, describe(device) if device is not None else None)
        with lock:
            results.append(result)
            if not go_on:
                state["interrupted"] = True
                cancel.set()
        if announce is not None:
            announce(result)
        return go_on

    def cpu_worker() -> None:
        lane = progress.lane("cpu")
        for entry in cpu:
            if cancel.is_set() or not one(entry, lane):
                break

    gpu_queue = list(gpu)

    def gpu_worker(device: Any = None) -> None:
        lane = progress.lane(f"gpu{device.index}") if len(devices) > 1 else progress
        while not cancel.is_set():
            with lock:
                if not gpu_queue:
                    return
                entry = gpu_queue.pop(0)
            if not one(entry, lane, device):
                return

    def stop() -> None:
        state["interrupted"] = True
        cancel.set()

    # Waited for through kvdiag.proc.threads, never by joining a running thread: a signal
    # inside Thread.join makes CPython believe the worker ended while it still runs.
    workers = [Worker(cpu_worker, name="kvdiag-sweep-cpu")] if cpu else []
    if len(devices) > 1:
        workers += [Worker(gpu_worker, d, name=f"kvdiag-sweep-gpu{d.index}") for d in devices]
    try:
        for worker in workers:
            worker.start()
        if len(devices) < 2:
            gpu_worker(devices[0] if devices else None)
        wait_all(workers, on_interrupt=stop)
    except KeyboardInterrupt:
        stop()
    finally:
        wait_all(workers, on_interrupt=stop)   # a second signal while they wind down changes nothing
    run = SweepRun(sorted(results, key=lambda r: entry_sort_key(r.entry.id)), state["interrupted"])
    return run


def build_sweep(run: SweepRun, target_dict: dict, *, started_at: str, wall_s: float, shard: str | None,
                selection: Sequence[Entry], shard_from: Mapping[str, Any] | None = None) -> Sweep:
    outcomes = [sweep_outcome(r.outcome, title=r.entry.title, run_dir=str(r.run_dir.path),
                              files=r.entry.location.get("files", ()) if r.entry.location else (), device=r.device)
                for r in run.results]
    return Sweep(target=target_dict, outcomes=outcomes, started_at=started_at, wall_s=round(wall_s, 3), shard=shard,
                 kvdiag_version=__version__, selection=[e.id for e in selection], interrupted=run.interrupted,
                 shard_from=shard_from)


def shard_label(shard: str | None, shard_from: Mapping[str, Any] | None, selected: int) -> str:
    """`` (shard 3/4 of 13 selected, from slurm)`` for the progress line; "" for no shard."""
    if not shard:
        return ""
    return f" (shard {shard} of {selected} selected" + (f", from {shard_from['engine']}" if shard_from else "") + ")"


@dataclass(frozen=True)
class SweepResult:
    sweep: Sweep
    path: Path                 # the sweep.json under the run store
    run_dir: RunDir


def run_sweep(selection: Sequence[Entry], build_dir: Path | None, *, shard: str | None = None,
              shard_from: Mapping[str, Any] | None = None, sanitizer: Path | None = None,
              check_staleness: bool = True, save: Path | None = None, record: bool = True,
              devices: str | None = None, progress: Progress | None = None, step_budget: float | None = None,
              skip_builds: bool = False) -> SweepResult:
    """Prepare the target once, run this shard of the selection, save and record the sweep.

    The sweep file (under the run store, and `save`) is rewritten after every entry,
    atomically, marked interrupted until the last one is in: a sweep killed midway
    keeps every verdict it had. ``shard_from`` (`kvdiag.shards.Shard.origin`) is saved with it.
    """
    from kvdiag.store.history import record_sweep
    from kvdiag.engine.run.attribution import attribute_outcome
    from kvdiag.engine.verdict.devices import select_devices

    progress = progress or Progress()
    entries = shard_entries(selection, shard)
    if save is not None:
        check_sweep_path(save)    # before the first entry, not after the last
    if build_dir is not None:
        check_build_dir(build_dir)           # before the sweep's run folder is made
    home = kvdiag_home()
    store = RunStore(home)
    choices = {"skip_builds": skip_builds, "step_budget_s": step_budget}
    running = RunRecord(entry="sweep", status="running", kind="sweep", fields={
        "kvdiag_version": __version__, "shard": shard, "shard_from": shard_from, "entries": [e.id for e in entries],
        **choices})
    sweep_dir = store.create("sweep", running)
    started_at, started = utc_now(), time.monotonic()
    progress.say(f"sweep of {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
                 + shard_label(shard, shard_from, len(selection))
                 + f"; inspecting {build_dir or 'no build'}")
    target = prepare_target(build_dir, log_dir=sweep_dir.logs, sanitizer=sanitizer, check_staleness=check_staleness,
                            home=home)
    target_dict = target.to_dict()
    look_up_commits(target.history, entries)
    gate_provider = controls_gate_provider(home, target, sweep_dir.logs)
    path = sweep_dir.path / SWEEP_FILE
    finished = SweepRun(interrupted=True)     # until the last entry is in
    lock = threading.Lock()

    def save_all(run: SweepRun) -> Sweep:
        # the sweep as saved, `sources` resolved: what `--format` prints is what `render` gives later
        sweep = with_sources(build_sweep(run, target_dict, started_at=started_at, wall_s=time.monotonic() - started,
                                         shard=shard, selection=selection, shard_from=shard_from))
        save_sweep(sweep, path)
        if save is not None:
            save_sweep(sweep, save)
        return sweep

    def announce(result: EntryResult) -> None:
        o = result.outcome
        k = f" {o.k_of_n}" if o.n > 1 else ""
        progress.say(f"{o.entry_id} {o.verdict.value}{k} ({o.duration_s:.1f} s)")
        progress.advance(f"{o.entry_id} {o.verdict.value}")
        with lock:
            finished.results.append(result)
            finished.results.sort(key=lambda r: entry_sort_key(r.entry.id))
            save_all(finished)

    chosen = select_devices(target.gpu.devices, devices)
    if len(chosen) > 1:
        progress.say(f"GPU entries spread over {len(chosen)} GPUs: " + ", ".join(f"{d.index} {d.name}" for d in chosen))
    options = RunOptions(step_budget=step_budget, skip_builds=skip_builds, attribute=attribute_outcome)
    progress.begin("entries", len(entries))
    try:
        run = execute_entries(entries, target, store, gate_provider, options=options, progress=progress,
                              announce=announce, devices=chosen)
    finally:
        progress.end()
    with lock:
        sweep = save_all(run)
    sweep_dir.write_record(running.with_status("interrupted" if sweep.interrupted else "finished",
                                               target=target_dict, sweep=SWEEP_FILE, counts=sweep.counts()))
    if record:
        try:
            record_sweep(sweep, path=path, home=home)
        except (KvdiagError, sqlite3.Error, OSError) as exc:   # a secondary store never costs the sweep
            print(f"kvdiag: warning: the sweep is saved but not recorded in the history: {exc}", file=sys.stderr)
    return SweepResult(sweep, path, sweep_dir)


def sweep_exit_code(sweep: Sweep) -> int:
    """As `kvdiag run` with several entries (kvdiag.records.verdict.combined_exit_code)."""
    return combined_exit_code([o.verdict for o in sweep.outcomes], sweep.interrupted)
