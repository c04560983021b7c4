"""A step's comparison arm: a signature-less step run once per `kvdiag run`, on the same build.

Some defects are a ratio between two configurations (D5: the host compute buffer
with a KVarN cache against the same server with q8_0). The verdict is the judged
step's; the arm runs in the same run folder, so its figure comes from the same
build, model and machine. It runs at most once, through the same attempt pipeline
as the judged step (engine.verdict.attempt): the first time a relative matcher
(:mod:`kvdiag.engine.evidence.relative`) asks for its figure, while the judged step's first
attempt is judged, or otherwise after the verdict, when the lines its ``expect``
patterns match are quoted beside it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable, Mapping

from kvdiag.controls.gate import GateProvider
from kvdiag.engine.evidence.observe import ArmReading, quote_seen
from kvdiag.engine.verdict.attempt import attempt_step
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.errors import AttemptInterrupted
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.parse.text import strip_ansi
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

# A judged step that ended like this ran nothing worth comparing against.
NOTHING_TO_COMPARE = (Verdict.SKIPPED, Verdict.NOT_APPLICABLE, Verdict.ERROR)
# The arm's own attempt is judged without a signature: a healthy run of it comes out so, and
# every process of it ended well (a server: answered its requests).
RAN_AS_EXPECTED = (Verdict.NOT_REPRODUCED,)

# Runs the arm's step once and returns its attempt (raising AttemptInterrupted on Ctrl-C).
ArmAttempt = Callable[[Step], Attempt]


class ComparisonArm:
    """The comparison arm of one judged step in one run, run the first time it is read."""

    def __init__(self, arm: Step, run_dir: RunDir, attempt: ArmAttempt):
        self.step = arm
        self._run_dir = run_dir
        self._attempt = attempt
        self._reading: ArmReading | None = None

    @property
    def done(self) -> bool:
        return self._reading is not None

    @property
    def interrupted(self) -> bool:
        return self._reading is not None and self._reading.interrupted

    def read(self) -> ArmReading:
        """The arm's output, running it now if it has not run in this run yet."""
        if self._reading is None:
            try:
                attempt, interrupted = self._attempt(self.step), False
            except AttemptInterrupted as exc:
                attempt, interrupted = exc.attempt, True
            self._reading = _reading(self.step, attempt, interrupted, self._run_dir)
        return self._reading

    def summary(self, verdict: Verdict) -> dict[str, Any] | None:
        """What the arm's ``expect`` patterns saw, for run.json and the verdict's reason (None when
        the judged step ran nothing worth comparing and the arm has not run)."""
        if not self.done and verdict in NOTHING_TO_COMPARE:
            return None
        reading = self.read()
        text = reading.stream("combined")
        seen = [quote_seen(p, text) for p in self.step.expect if re.search(p, text, re.M)]
        missing = [f"/{p}/" for p in self.step.expect if not re.search(p, text, re.M)]
        return {"step": self.step.name, "seen": seen, "missing": missing, "exit": reading.exit,
                "logs": list(reading.logs)}


def comparison_arm(entry: Entry, step: Step, target, run_dir: RunDir, options: RunOptions,
                   gate_provider: GateProvider) -> ComparisonArm | None:
    """The step's comparison arm, if it has one, on ``target`` (engine.verdict.target.Target); a Ctrl-C during
    it keeps the judged step's verdict and is recorded (the arm says it was interrupted)."""
    arm = entry.step(step.compare_with) if step.compare_with else None
    if arm is None:
        return None
    return ComparisonArm(arm, run_dir, lambda arm_step: attempt_step(
        entry, arm_step, target, run_dir, 1, f"{entry.id} [{arm_step.name}] comparison arm",
        replace(options, comparison=None), gate_provider))


def _reading(arm: Step, attempt: Attempt, interrupted: bool, run_dir: RunDir) -> ArmReading:
    streams = {name: strip_ansi("".join(_read(run_dir, command, f"{name}_path") for command in attempt.commands))
               for name in ("stdout", "stderr", "combined")}
    logs = tuple(c["combined_path"] for c in attempt.commands if c.get("combined_path"))
    exit_ = attempt.evidence.exit or attempt.reason
    failed = next((c for c in attempt.commands if not c.get("ok")), None)
    ran = attempt.verdict in RAN_AS_EXPECTED and failed is None and not interrupted
    if interrupted:
        why = "was interrupted"
    elif attempt.verdict not in RAN_AS_EXPECTED:
        why = f"ended {attempt.verdict.value}: {attempt.reason}"
    else:   # its `expect` lines were seen, but a process of it failed (a server that died before it served)
        why = f"failed: {failed.get('description') or exit_}" if failed is not None else ""
    return ArmReading(step=arm.name, ran=ran, why=why, streams=streams, exit=exit_, logs=logs,
                      interrupted=interrupted)


def _read(run_dir: RunDir, command: Mapping[str, Any], key: str) -> str:
    path = command.get(key)
    if not path:
        return ""
    file = run_dir.path / path
    return file.read_text(errors="replace") if file.is_file() else ""
