"""`kvdiag verify --before RUN`: a recorded run of the entry stands in for verify's BEFORE arm.

The seed-scale D3 arm is ten fresh llama-servers on a 27 GiB model: recorded once by
``kvdiag run D3 --runs 10``, it need not be paid for again by ``kvdiag verify D3``. A
recorded run is taken only when it is honestly the arm verify would run now (see
kvdiag.engine.verdict.arm for what that means): a run of this entry on the user's build, not
a verify's patched AFTER arm, finished, with all the runs it set out to make, and
recorded with its arm, which must not differ from the arm of now in anything. Any
other run is refused with one line naming what differs (`ArmMismatch`, exit 64),
before a worktree is made or a build started.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kvdiag.engine.verdict.arm import ARM_FORMAT, arm_differences
from kvdiag.errors import ArmMismatch, UsageError
from kvdiag.records.verdict import Outcome
from kvdiag.registry.entry import Entry
from kvdiag.store.runs import RUN_FILE, RunDir, RunStore, displayed_status, id_time, patched_arm
from kvdiag.text import first_line

LATEST = "latest"


@dataclass(frozen=True)
class ReusedRun:
    """The recorded run that is verify's BEFORE arm, and what the report says of it."""

    run_id: str
    run_dir: Path
    started_at: str | None
    outcome: Outcome
    runs: int
    kvdiag_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_dir": str(self.run_dir), "started_at": self.started_at,
                "runs": self.runs, "kvdiag_version": self.kvdiag_version}


def reuse_before(store: RunStore, entry: Entry, ref: str, now: Mapping[str, Any]) -> ReusedRun:
    """The run ``ref`` names (a run id, a unique prefix of one, or ``latest``: the entry's newest run)
    as verify's BEFORE arm, checked against ``now`` (the arm verify would run, `arm_record`'s form).

    Raises ArmMismatch naming what differs, UsageError for a run that is not there, RunUnreadable."""
    run = find_before(store, entry, ref)
    data = run.read_checked()
    why = refusal(run.run_id, data, entry, now)
    if why is not None:
        raise ArmMismatch(why)
    arm = data["arm"]
    return ReusedRun(run.run_id, run.path, id_time(run.run_id), _outcome(data), int(arm["runs"]),
                     data.get("kvdiag_version"))


def find_before(store: RunStore, entry: Entry, ref: str) -> RunDir:
    """The run named; ``latest`` is the entry's newest run whatever its state (an interrupted newest
    run is refused, not silently passed over for an older one), a verify's AFTER arm excepted."""
    if ref != LATEST:
        return store.find(ref)
    for run in reversed(store.all_dirs()):
        if run.label.upper() != entry.id.upper():
            continue
        try:
            if patched_arm(run.read()):
                continue
        except (OSError, ValueError):
            if not (run.path / RUN_FILE).exists():
                continue
        return run
    raise UsageError(f"no recorded run of {entry.id} in {store.root} to reuse as the BEFORE arm: run "
                     f"`kvdiag run {entry.id} --build BUILD` first, or leave out --before")


def refusal(run_id: str, data: Mapping[str, Any], entry: Entry, now: Mapping[str, Any]) -> str | None:
    """Why the recorded run (its run.json) cannot be the BEFORE arm, in one line; None when it can."""
    name = f"run {run_id}"
    if data.get("entry") != entry.id or data.get("kind") is not None:
        what = f"a {data.get('kind')} run" if data.get("kind") else f"a run of {data.get('entry')!r}"
        return f"{name} is {what}, not a verdict run of {entry.id}"
    if patched_arm(data):
        return f"{name} is the AFTER arm of a verify (a scratch build with probes applied), not the user's build"
    arm = data.get("arm")
    planned = arm.get("runs") if isinstance(arm, Mapping) else None
    status = displayed_status(dict(data))
    try:
        outcome, unreadable = _outcome(data), None
    except (KeyError, TypeError, ValueError) as exc:
        outcome, unreadable = None, str(exc)
    if status != "finished" or (outcome is not None and outcome.extra.get("interrupted")):
        done = f", in run {outcome.n} of {planned}" if outcome is not None and outcome.n and planned else ""
        return f"{name} did not finish (status {'interrupted' if status == 'finished' else status}{done})"
    if outcome is None:
        return f"{name} has no outcome kvdiag can read ({unreadable})"
    if not isinstance(arm, Mapping) or arm.get("format") != ARM_FORMAT:
        return (f"{name} does not record its arm (build files, model, repro; made by kvdiag "
                f"{data.get('kvdiag_version') or '?'}): run `kvdiag run {entry.id}` again to record one")
    if outcome.n < int(planned or 0):
        return (f"{name} ran {outcome.n} of its {planned} runs ({outcome.verdict.value}: "
                f"{first_line(outcome.reason)})")
    differences = arm_differences(arm, now)
    if differences:
        return f"{name} is not the arm verify would run now: " + "; ".join(differences)
    return None


def _outcome(data: Mapping[str, Any]) -> Outcome:
    raw = data.get("outcome")
    if not isinstance(raw, Mapping):
        raise ValueError("run.json has no outcome")
    return Outcome.from_dict({"entry": data.get("entry"), **raw})
