"""Steps an earlier bisection judged, taken instead of built again: a bisection longer than one machine's time.

On the device a full build of the fork's test-backend-ops took 1266.7 s at -j16
(a12d7e228, device session 10), so D1's cause bisection, two full builds and two
failing ones, does not fit one 30-minute lease; a CI job or a Slurm allocation has
the same kind of limit. ``kvdiag bisect … --resume RUN`` reads the steps RUN
recorded (``bisect-steps.json``: RUN is an earlier bisection of the same entry in
this run store, copied from the machine that ran it if need be, and it may have
been cut short) and takes a step from it only when all of these hold; any other
commit is built and run again:

* its verdict decides (the direction's old or new verdict). A skip is never
  taken: a build that failed there may have been that machine's fault;
* the entry run it names is in this store, finished, with that same verdict, for
  the repro step this bisection runs: the evidence travels with the verdict;
* its configure and build commands (the ``bisect-step`` run's own command
  records) are this bisection's, up to the scratch paths, the job count and a
  compiler launcher, none of which changes what is built;
* for an entry that needs a GPU, the GPU architectures its run recorded are this
  machine's: which kernel a case is routed to depends on the GPU (D1).

The steps taken go to ``resume.json`` in the new bisection's run folder, which the
``bisect-step`` subprocesses read; every taken step names the run it came from,
and every step passed over says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from kvdiag.engine.verdict.plan import pick_step
from kvdiag.workspace.scratch_build import BuildRecipe
from kvdiag.errors import UsageError
from kvdiag.fileio import load_json_file
from kvdiag.records.bisect import STEPS_FILE, Direction, StepRecord, steps_from
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RunDir, RunStore, displayed_status, write_json_atomic

__all__ = ["RESUME_FILE", "Resumed", "comparable_argv", "load_resumed", "read_resumed"]

RESUME_FILE = "resume.json"
_SOURCE, _BUILD = Path("/kvdiag-resume/src"), Path("/kvdiag-resume/build")
_JOBS_FLAGS = {"-j", "--jobs", "--parallel"}
_JOINED_JOBS = re.compile(r"^-j\d+$")
_LAUNCHER = re.compile(r"^-DCMAKE_\w+_COMPILER_LAUNCHER(:\w+)?=")


@dataclass(frozen=True)
class Resumed:
    """What a bisection takes from an earlier one: its steps by commit, and why others were passed over."""

    run_id: str
    status: str                                       # the earlier bisection's status ("finished", "abandoned", …)
    steps: Mapping[str, StepRecord] = field(default_factory=dict)
    passed_over: tuple[tuple[str, str], ...] = ()     # (commit, why)

    def take(self, commit: str, role: str) -> StepRecord | None:
        """The earlier step at ``commit``, in this bisection's ``role``, or None (build and run it here)."""
        step = self.steps.get(commit)
        return replace(step, role=role) if step is not None else None

    def summary(self) -> str:
        taken = ", ".join(c[:12] for c in self.steps) or "none"
        over = "; ".join(f"{c[:12]}: {why}" for c, why in self.passed_over)
        return (f"resuming from {self.run_id} ({self.status}): {len(self.steps)} step(s) taken ({taken})"
                + (f", {len(self.passed_over)} passed over ({over})" if self.passed_over else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.run_id, "status": self.status,
                "steps": {c: s.to_dict() for c, s in self.steps.items()},
                "passed_over": [{"commit": c, "why": why} for c, why in self.passed_over]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Resumed":
        steps = {str(c): StepRecord.from_dict(s) for c, s in (data.get("steps") or {}).items()
                 if isinstance(s, Mapping)}
        over = tuple((str(p.get("commit")), str(p.get("why"))) for p in data.get("passed_over") or ()
                     if isinstance(p, Mapping))
        return cls(str(data.get("from") or ""), str(data.get("status") or ""), steps, over)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())


def read_resumed(path: Path | None) -> Resumed | None:
    """``resume.json`` as the ``bisect-step`` subprocess reads it; None when absent or unreadable (the step is
    then built and run: never a verdict taken on a file that cannot be read)."""
    if path is None:
        return None
    try:
        data = load_json_file(path)
    except (OSError, ValueError):
        return None
    return Resumed.from_dict(data) if isinstance(data, Mapping) else None


def load_resumed(store: RunStore, run_id: str, entry: Entry, recipe: BuildRecipe | None, step: str | None,
                 direction: Direction, gpu_archs: Callable[[], Sequence[str]]) -> Resumed:
    """The steps of the bisection ``run_id`` this one may take (see the module). UsageError, one line, when
    ``run_id`` is not an earlier bisection of ``entry`` with a readable step record. ``gpu_archs`` gives this
    machine's GPU architectures; it is asked only for an entry that needs a GPU."""
    run = store.find(run_id)
    if run.label.upper() != f"{entry.id}-bisect".upper():
        raise UsageError(f"--resume {run_id}: run {run.run_id} is not a bisection of {entry.id} "
                         f"(it is {run.label})")
    try:
        data = load_json_file(run.path / STEPS_FILE)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume {run_id}: run {run.run_id} has no readable {STEPS_FILE}: {exc}") from None
    recorded = steps_from(data) if isinstance(data, list) else []
    status = _status(run)
    step_name = pick_step(entry, step).name
    decisive = {direction.old_verdict, direction.new_verdict}
    step_runs = _step_runs(store, entry)
    archs: list[str] | None = None
    taken: dict[str, StepRecord] = {}
    over: list[tuple[str, str]] = []
    for recorded_step in recorded:
        judged_in = recorded_step.reused_from or run.run_id     # a step RUN itself took names where it was judged
        why = _why_not(recorded_step, decisive, store, step_name, recipe, step_runs)
        if why is None and entry.requires.gpu:
            if archs is None:
                archs = sorted(set(gpu_archs()))
            why = _arch_mismatch(store, recorded_step, archs)
        if why is not None:
            over.append((recorded_step.commit, why))
        else:
            taken[recorded_step.commit] = replace(recorded_step, reused_from=judged_in)
    for commit in list(taken):      # a commit judged twice with different verdicts is taken from neither
        verdicts = {s.verdict for s in recorded if s.commit == commit and s.verdict in decisive}
        if len(verdicts) > 1:
            del taken[commit]
            over.append((commit, f"judged {' and '.join(sorted(verdicts))} in {run.run_id}"))
    return Resumed(run.run_id, status, taken, tuple(over))


def comparable_argv(argv: Iterable[str], source: Path, build: Path) -> tuple[str, ...]:
    """A command as it bears on what is built: the scratch source and build paths as ``{source}`` and
    ``{build}``, the job count as ``{jobs}``, and no compiler-launcher definition (ccache changes how fast a
    build is, not what it builds)."""
    out: list[str] = []
    jobs_next = False
    for token in argv:
        token = str(token).replace(str(build), "{build}").replace(str(source), "{source}")
        if jobs_next:
            out.append("{jobs}")
            jobs_next = False
        elif token in _JOBS_FLAGS:
            out.append(token)
            jobs_next = True
        elif _JOINED_JOBS.match(token):
            out.append("-j{jobs}")
        elif not _LAUNCHER.match(token):
            out.append(token)
    return tuple(out)


def _status(run: RunDir) -> str:
    try:
        return displayed_status(run.read())
    except (OSError, ValueError):
        return "unreadable"


def _entry_run(store: RunStore, step: StepRecord) -> dict[str, Any] | None:
    """The entry run a step names, found in this store by its folder's name (the path was the other machine's)."""
    if not step.run_dir:
        return None
    name = Path(str(step.run_dir)).name
    path = store.root / name
    try:
        data = load_json_file(path / "run.json")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _step_runs(store: RunStore, entry: Entry) -> dict[str, RunDir]:
    """The ``<ID>-bisect-step`` runs of this store by the entry run each one made (its folder's name)."""
    found: dict[str, RunDir] = {}
    for run in store.all_dirs():
        if run.label.upper() != f"{entry.id}-bisect-step".upper():
            continue
        try:
            data = run.read()
        except (OSError, ValueError):
            continue
        step = data.get("step") if isinstance(data, dict) else None
        if isinstance(step, dict) and step.get("run_dir"):
            found[Path(str(step["run_dir"])).name] = run
    return found


def _why_not(step: StepRecord, decisive: set[str], store: RunStore, step_name: str, recipe: BuildRecipe | None,
             step_runs: Mapping[str, RunDir]) -> str | None:
    """Why ``step`` cannot be taken (None: it can, but for the GPU check)."""
    if step.verdict not in decisive:
        return f"{step.verdict} is not a verdict this direction decides on; judged again"
    run = _entry_run(store, step)
    if run is None:
        return f"its run {Path(str(step.run_dir or '?')).name} is not in this run store, or cannot be read"
    outcome = run.get("outcome") if isinstance(run.get("outcome"), dict) else {}
    if run.get("status") != "finished" or outcome.get("verdict") != step.verdict:
        return (f"its run {Path(str(step.run_dir)).name} is {run.get('status')} with verdict "
                f"{outcome.get('verdict')}, not {step.verdict}")
    if run.get("step") != step_name:
        return f"its run ran repro step {run.get('step')!r}, this bisection runs {step_name!r}"
    if recipe is None:
        return None
    return _commands_differ(run, step_runs.get(Path(str(step.run_dir)).name), recipe)


def _commands_differ(run: Mapping[str, Any], step_run: RunDir | None, recipe: BuildRecipe) -> str | None:
    """Why the step's recorded configure and build differ from ``recipe``'s (None: they do not). The scratch
    paths come from the step's own records: its commands ran in the source tree (their ``cwd``), and its
    entry run's target names the build folder."""
    build_dir = ((run.get("target") or {}).get("build") or {}).get("build_dir")
    recorded = {phase: _recorded_command(step_run, phase) for phase in ("configure", "build")} if step_run else {}
    source_dir = next((cmd.get("cwd") for cmd in recorded.values() if cmd and cmd.get("cwd")), None)
    if not recorded.get("build") or not source_dir or not build_dir:
        return "its build commands are not recorded in this run store"
    wanted = {"configure": recipe.configure_argv(_SOURCE, _BUILD), "build": recipe.build_argv(_SOURCE, _BUILD)}
    for phase, argv in wanted.items():
        theirs_argv = (recorded.get(phase) or {}).get("argv")
        if argv is None and theirs_argv is None:
            continue
        mine = comparable_argv(argv or (), _SOURCE, _BUILD)
        theirs = comparable_argv(theirs_argv or (), Path(source_dir), Path(build_dir))
        if mine != theirs:
            return f"its {phase} command differs: {' '.join(theirs) or '(none)'}"
    return None


def _recorded_command(step_run: RunDir, phase: str) -> dict[str, Any] | None:
    """The step's ``bisect-<phase>.cmd.json`` (argv and cwd as the subprocess layer recorded them), or None."""
    try:
        data = load_json_file(step_run.logs / f"bisect-{phase}.cmd.json")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("argv"), list):
        return None
    return {"argv": [str(a) for a in data["argv"]], "cwd": data.get("cwd")}


def _arch_mismatch(store: RunStore, step: StepRecord, archs: Sequence[str]) -> str | None:
    run = _entry_run(store, step) or {}
    devices = (((run.get("target") or {}).get("environment") or {}).get("gpu") or {}).get("devices") or []
    theirs = sorted({str(d.get("arch")) for d in devices if isinstance(d, dict) and d.get("arch")})
    if not theirs:
        return "its run recorded no GPU architecture"
    if not archs:
        return f"its run was on {', '.join(theirs)} and no GPU is visible here"
    if theirs != list(archs):
        return f"its run was on {', '.join(theirs)}, this machine has {', '.join(archs)}"
    return None
