"""One `kvdiag discover` invocation: the target, the suite's case space, every case under every
tool in parallel batches, the roots, the saved record.

The tools are those whose control passed on this machine (the doctor's canaries: a tool that
cannot see its own defect class here proves nothing by a clean case), unless asked for by
name; an asked-for tool whose control failed still runs, and the result says its clean cases
prove nothing. The processes share the GPU's slot pool (proc.slots), one unit of work per
process, dispatched as a scan's are (engine.scan.dispatch): the heaviest units by measured cost
first (engine.discover.costs), so the last process to start is a light one.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvdiag import __version__
from kvdiag.constants import SANITIZER_TOOLS
from kvdiag.engine.verdict.devices import select_devices, visible_value
from kvdiag.engine.scan.dispatch import dispatch
from kvdiag.engine.discover.batch import ROUTE, Runner, Unit, UnitOutcome, run_unit
from kvdiag.engine.discover.cases import CUT, CaseRecord
from kvdiag.engine.discover.costs import CaseCosts, discover_costs, load_costs, order_units
from kvdiag.engine.discover.numeric import run_numeric
from kvdiag.engine.discover.occupancy import occupancy
from kvdiag.engine.discover.frames import frameless_tools
from kvdiag.engine.discover.program import choose_program
from kvdiag.engine.discover.reframe import apply_frames, reframe
from kvdiag.engine.discover.result import DiscoverResult, build_roots
from kvdiag.engine.discover.roots import relative_paths
from kvdiag.engine.discover.routing import SharedMemoryRouter, plan_routing
from kvdiag.engine.discover.space import SuiteSpace, list_suite
from kvdiag.engine.verdict.target import controls_gate_provider
from kvdiag.engine.scan.batch import cases_per_pattern, deal
from kvdiag.engine.verdict.target import prepare_target
from kvdiag.errors import CaseListingFailed, ScanNotRun
from kvdiag.home import kvdiag_home
from kvdiag.proc.mps import mps_pipe
from kvdiag.proc.slots import scan_slots
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord
from kvdiag.shards import Shard
from kvdiag.store.runs import RunStore
from kvdiag.store.discoveries import DISCOVER_FILE, save_discovery
from kvdiag.store.sweeps import utc_now
from kvdiag.workspace.build import check_build_dir

CASE_BUDGET_S = 120.0
ROUTE_BATCH = 256       # cases per route process: no sanitizer, about 0.06 s a case (docs/performance.md)
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc")
_SKIP_DIRS = {".git", "build", "node_modules", "__pycache__"}


def run_discover(build_dir: Path, *, entries: Sequence[Any] = (), tools: Sequence[str] = (),
                 ops: Sequence[str] = (), params: str | None = None, jobs: int | None = None,
                 case_budget_s: float = CASE_BUDGET_S, batch: int = 0, shard: Shard | None = None,
                 sanitizer: Path | None = None, devices: str | None = None, registry: str | None = None,
                 program: str = "auto", route: bool = True, backtrace: str = "auto",
                 racecheck_workers: int | None = None, progress: Progress | None = None) -> DiscoverResult:
    """Discover every root under ``tools`` (default: the trusted ones) over the suite's cases."""
    progress = progress or Progress()
    home = kvdiag_home()
    check_build_dir(build_dir)
    store = RunStore(home)
    run_dir = store.create("discover", RunRecord(entry=None, status="running", kind="discover",
                                                 fields={"tools": list(tools), "ops": list(ops), "params": params}))
    record = RunRecord(entry=None, status="failed", kind="discover", fields={"note": "kvdiag stopped before the end"})
    try:
        result = _discover(run_dir, build_dir, home=home, entries=entries, tools=tools, ops=ops, params=params,
                           jobs=jobs, case_budget_s=case_budget_s, batch=batch, shard=shard, sanitizer=sanitizer,
                           devices=devices, registry=registry, program=program, route=route, backtrace=backtrace,
                           racecheck_workers=racecheck_workers, progress=progress)
        record = RunRecord(entry=None, status="interrupted" if result.interrupted else "finished", kind="discover",
                           fields={"totals": result.to_dict()["totals"], "roots": len(result.defects),
                                   "new_roots": len(result.new_roots), "file": DISCOVER_FILE})
        return result
    except ScanNotRun as exc:
        record = RunRecord(entry=None, status="finished", kind="discover",
                           fields={"verdict": exc.verdict, "reason": str(exc)})
        raise
    except KeyboardInterrupt:
        record = RunRecord(entry=None, status="interrupted", kind="discover",
                           fields={"note": "interrupted: per-process logs are in logs/"})
        raise
    finally:
        run_dir.write_record(record)


def _discover(run_dir, build_dir: Path, *, home: Path, entries, tools, ops, params, jobs, case_budget_s, batch,
              shard, sanitizer, devices, registry, program, route, backtrace, racecheck_workers,
              progress: Progress) -> DiscoverResult:
    target = prepare_target(build_dir, log_dir=run_dir.logs, sanitizer=sanitizer, check_staleness=False, home=home)
    binary = target.build.binary("test-backend-ops") if target.build is not None else None
    missing = _missing(target, binary)
    if missing:
        raise ScanNotRun("skipped", f"discover cannot run here: skipped: {missing}")
    gates = tool_gates(controls_gate_provider(home, target, run_dir.logs), tools)
    chosen_tools = tuple(t for t, g in gates.items() if g["run"])
    if not chosen_tools:
        raise ScanNotRun("skipped", "discover cannot run here: skipped: no sanitizer tool's control passed on this "
                                    "machine (`kvdiag doctor` says why); name a tool with --tool to run it anyway")
    known = tuple(target.backend_ops.ops) if target.backend_ops and target.backend_ops.ops else ()
    try:
        space = list_suite(binary, log_dir=run_dir.logs, ops=ops, params=params, known_ops=known, shard=shard)
    except CaseListingFailed as exc:
        raise ScanNotRun("inconclusive", f"discover cannot run here: inconclusive: {exc}") from None
    chosen = select_devices(target.gpu.devices, devices)
    device = chosen[0] if chosen else target.first_device
    memory = device.total_memory_bytes if device else None
    workers = jobs or scan_slots(memory)
    cancel = threading.Event()
    chosen_program = choose_program(target, binary, program)
    progress.say(f"discover: {chosen_program.describe()}")
    routing = plan_routing(chosen_tools, chosen_program.mode, route=route)
    progress.say(f"discover: {routing.why}")
    runner = Runner(binary=chosen_program.path, sanitizer=target.sanitizer, log_dir=run_dir.logs,
                    case_budget_s=case_budget_s, memory_bytes=memory, cancel=cancel, mode=chosen_program.mode,
                    listed=frozenset({routing.source}) if routing.active else frozenset(), backtrace=backtrace,
                    racecheck_workers=racecheck_workers)
    all_workers = workers * max(1, len(chosen))
    costs, listing = discover_costs(home, chosen_program.mode), {routing.source: routing.routed} if routing.active else None
    units = plan_units(space, [t for t in chosen_tools if t not in routing.routed] if routing.active else chosen_tools,
                       all_workers, batch, costs=costs, gated_by=listing)
    router = None
    if routing.active:
        router = SharedMemoryRouter(routing, dict(space.supported), mode=chosen_program.mode,
                                    batch_size=lambda cases: batch_size(space.cases, all_workers, batch, cases))
        if routing.source == ROUTE:
            units = route_units(space) + units
    result = DiscoverResult(tools=chosen_tools, gates=gates, space=space.to_dict(), workers=workers,
                            case_budget_s=case_budget_s, started_at=utc_now(), target=target.to_dict(),
                            run_dir=run_dir.path, shard=shard.text if shard else None, kvdiag_version=__version__,
                            registry=registry, program=chosen_program.to_dict(), routing=routing.to_dict(),
                            backtrace=backtrace, racecheck_workers=racecheck_workers, order=costs.source)
    pipe = mps_pipe()
    if pipe is not None:
        result.mps = pipe.to_dict()
        progress.say(f"discover: {pipe.describe()}")
    progress.say(f"discover: {space.cases} case(s) of {len(space.supported)} op(s) under "
                 f"{', '.join(chosen_tools)}: {len(units)} process(es) to start, {workers} at a time"
                 + (f" on each of {len(chosen)} GPUs" if len(chosen) > 1 else ""))
    started = time.monotonic()
    result.interrupted = run_units(units, runner, result, workers=workers, devices=chosen, cancel=cancel,
                                   progress=progress, total=space.cases * len(chosen_tools), router=router)
    if router is not None:
        result.routing.update(router.counts)
    ran = occupancy(result.processes, all_workers)
    result.occupancy = ran.to_dict() if ran is not None else None
    if not result.interrupted:
        result.records, result.numeric_runs = run_numeric(
            result.records, binary=binary, log_dir=run_dir.logs, budget_s=case_budget_s, workers=workers,
            env={"CUDA_VISIBLE_DEVICES": visible_value(device)} if device is not None else None, cancel=cancel)
        result.interrupted = cancel.is_set()
    result.records += unrun(space, chosen_tools, result.records, result.interrupted)
    source_dir = target.build.source_dir if target.build is not None else None
    result.relative, result.source_lines = tree_facts(result.records, source_dir)
    result.roots = build_roots(result.records, result.relative, result.source_lines, entries)
    if not result.interrupted and not cancel.is_set():
        result.frames = reframe(result.roots, frameless_tools(chosen_tools, backtrace), runner, workers=workers,
                                relative=result.relative, device=device)
        if result.frames:
            progress.say(f"discover: {len(result.frames)} root(s) whose records named no launching kernel: each "
                         f"one's smallest case ran again alone to name it")
        apply_frames(result.roots, result.frames)
        result.interrupted = cancel.is_set()
    result.wall_s = time.monotonic() - started
    save_discovery(result.to_dict(), run_dir.path / DISCOVER_FILE)
    return result


def _missing(target, binary) -> str | None:
    if binary is None:
        return "the build has no test-backend-ops"
    if target.sanitizer is None:
        return "compute-sanitizer was not found (--sanitizer, or on PATH)"
    if not target.gpu.available:
        return "no CUDA GPU"
    return None


def tool_gates(provider, asked: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each tool's control: asked-for tools run whatever it says (a failed one noted), and without a
    list the tools whose control passed here run."""
    out: dict[str, dict[str, Any]] = {}
    for tool in (asked or SANITIZER_TOOLS):
        gate = provider(tool)
        run = bool(asked) or gate.allowed
        note = gate.reason if gate.allowed else f"its control did not pass here, so its clean cases prove nothing: {gate.reason}"
        out[tool] = {"trusted": gate.allowed, "run": run, "reason": note}
    return out


MAX_BATCH = 32
"""Discovery's automatic batch: at most this many cases a process. A suite's processes are many and
mixed (each op and tool its own), so they already even the load out; a scan's single op takes larger
batches (scan_batch.MAX_BATCH)."""


def batch_size(total: int, all_workers: int, batch: int, cases: Sequence[str]) -> int:
    """Cases per process: ``batch``, or 0: as many as spread ``total`` cases evenly over the workers,
    at most MAX_BATCH; never more than one -p regex holds."""
    size = batch or max(1, min(MAX_BATCH, -(-max(1, total) // max(1, all_workers))))
    return max(1, min(size, cases_per_pattern(cases)))


def route_units(space: SuiteSpace) -> list[Unit]:
    """Every case once with no sanitizer, listing its launches (engine.discover.routing), largest first."""
    units: list[Unit] = []
    for op, cases in space.supported.items():
        size = max(1, min(ROUTE_BATCH, cases_per_pattern(cases)))
        units += [Unit(ROUTE, op, tuple(dealt)) for dealt in deal(list(cases), size)]
    return sorted(units, key=lambda u: -len(u.cases))


def plan_units(space: SuiteSpace, tools: Sequence[str], all_workers: int, batch: int = 0, *,
               costs: CaseCosts | None = None, gated_by: Mapping[str, Sequence[str]] | None = None) -> list[Unit]:
    """The processes to start: each op's cases dealt into batches (batch_size); each tool's
    heaviest estimate first (engine.discover.costs; ``gated_by`` names, for the tool whose processes
    list the launches, the routed tools waiting on them), the tools in turn.

    Dealt, not sliced: test-backend-ops lists an op's shapes from small to large, so consecutive
    slices put all of its heaviest cases in one or two processes that outlive the rest. On the H200
    (device session 19) TOP_K's sliced batches under racecheck ran 6.5 s to over 336 s, the last
    one holding the 65536- to 524288-element rows. Among one op's batches, the one with the most
    elements (engine.discover.findings.case_elements) starts first."""
    costs = costs if costs is not None else load_costs()
    per_tool: list[list[Unit]] = []
    for tool in tools:
        units: list[Unit] = []
        for op, cases in space.supported.items():
            size = batch_size(space.cases, all_workers, batch, cases)
            units += [Unit(tool, op, tuple(dealt)) for dealt in deal(list(cases), size)]
        per_tool.append(order_units(units, costs, gated_by=gated_by))
    # The tools take turns: a discovery cut short by a deadline has judged some of every tool's cases.
    return [unit for turn in itertools.zip_longest(*per_tool) for unit in turn if unit is not None]


def unrun(space: SuiteSpace, tools: Sequence[str], records, interrupted: bool) -> list[CaseRecord]:
    """A cut record for every selected case that has none: its process never started (a Ctrl-C or
    SIGTERM stopped the discovery first). A discovery never drops a case without saying why."""
    seen = {r.key for r in records}
    why = ("not run: the discovery was interrupted before its process started" if interrupted
           else "not run: no process of this discovery reported it (a kvdiag fault; its logs are in the run)")
    return [CaseRecord(tool=tool, op=op, params=params, state=CUT, why=why)
            for tool in tools for op, cases in space.supported.items() for params in cases
            if (tool, op, params) not in seen]


def run_units(units: Sequence[Unit], runner: Runner, result: DiscoverResult, *, workers: int, devices: Sequence[Any],
              cancel: threading.Event, progress: Progress, total: int,
              router: SharedMemoryRouter | None = None) -> bool:
    """Every unit through engine.scan.dispatch; a unit's cases to run again go to the front of the queue,
    and so do the routed tools' units as the router releases them. A route unit's records only feed the
    router: they are no tool's judgement."""
    names = iter(range(1, 1 << 30))
    progress.begin("cases", total)

    def start(unit: Unit, device: Any):
        name = f"{unit.tool}-{next(names):05d}"
        return lambda: run_unit(unit, runner, name=name, device=device)

    def finish(unit: Unit, outcome: UnitOutcome, device: Any) -> list[Unit]:
        take(outcome)
        if router is None:
            return outcome.again
        released, spared = router.take(outcome.records)
        result.records.extend(spared)
        for record in spared:
            progress.advance(f"{record.tool} {record.state}: {record.op}({record.params})")
        return outcome.again + released

    taken: set[int] = set()

    def take(outcome: UnitOutcome) -> None:
        # After a Ctrl-C, dispatch salvages every unit handed out, those already finished included.
        if id(outcome) in taken:
            return
        taken.add(id(outcome))
        judged = [r for r in outcome.records if r.tool != ROUTE]
        result.records.extend(judged)
        if outcome.row:
            result.processes.append(outcome.row)
        for record in judged:
            progress.advance(f"{record.tool} {record.state}: {record.op}({record.params})")

    try:
        return dispatch(units, start, finish, workers=workers, devices=devices, cancel=cancel, salvage=take,
                        name="kvdiag-discover")
    finally:
        progress.end()


def tree_facts(records, source_dir: Path | None) -> tuple[dict[str, str], dict[str, str]]:
    """(printed path -> tree path, tree path:line -> that line's text) for every site the records name."""
    printed = {f.file for r in records for f in r.findings if f.file}
    if not printed:
        return {}, {}
    files = list(_tree_files(source_dir)) if source_dir is not None else []
    relative = relative_paths(printed, source_dir, files)
    lines: dict[str, str] = {}
    wanted: dict[str, set[int]] = {}
    for record in records:
        for f in record.findings:
            if f.file in relative and f.line is not None:
                wanted.setdefault(relative[f.file], set()).add(f.line)
    for path, numbers in wanted.items():
        try:
            text = (Path(source_dir) / path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for n in numbers:
            if 1 <= n <= len(text):
                lines[f"{path}:{n}"] = text[n - 1].strip()
    return relative, lines


def _tree_files(source_dir: Path):
    root = Path(source_dir)
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.relpath(os.path.join(folder, name), root)
