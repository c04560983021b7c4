"""The numeric test of a fix: the touched op run plainly (no sanitizer, no signature), OK/FAIL counted.

A fix that silences the sanitizer but changes the op's results is no fix; the
entry's step named ``numeric`` (or its default test-backend-ops step) is run as a
plain process before and after, and read with the test-backend-ops parser.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kvdiag.engine.verdict.planning import TemplateProblem, render_step, template_context
from kvdiag.engine.verdict.target import Target
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

NUMERIC_STEP = "numeric"


@dataclass(frozen=True)
class NumericResult:
    """One plain (unsanitized) run of the numeric test step, parsed."""

    label: str                     # "numeric" or "numeric /hsk=256/"
    params: str | None
    executed: int = 0
    passed: int = 0
    failed: int = 0
    not_supported: int = 0
    finished: bool = False
    exit: str = ""
    process_ok: bool = False
    duration_s: float = 0.0
    log: str | None = None
    problem: str | None = None     # it could not run (no binary, a template problem)
    failures: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.problem is None

    @property
    def ok(self) -> bool:
        """Every executed case OK, at least one executed, and the program ended normally."""
        return self.ran and self.executed >= 1 and self.failed == 0 and self.process_ok

    def cell(self) -> str:
        if not self.ran:
            return f"not run: {self.problem}"
        text = f"{self.passed} OK / {self.failed} FAIL"
        if self.executed == 0:
            text += " (0 executed)"
        if not self.process_ok:
            text += f" ({self.exit})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "params": self.params, "executed": self.executed, "passed": self.passed,
                "failed": self.failed, "not_supported": self.not_supported, "finished": self.finished,
                "exit": self.exit, "process_ok": self.process_ok, "ok": self.ok,
                "duration_s": round(self.duration_s, 3), "log": self.log, "problem": self.problem,
                "failures": list(self.failures)}


def numeric_step(entry: Entry) -> Step | None:
    """The entry's ``numeric`` step; else its default step when that is a test-backend-ops step."""
    step = entry.step(NUMERIC_STEP)
    if step is not None:
        return step
    default = entry.default_step
    return default if default.kind == "backend-ops" else None


def run_numeric(entry: Entry, step: Step, target: Target, run_dir: RunDir, *, params: str | None = None,
                label: str = NUMERIC_STEP) -> NumericResult:
    """Run ``step`` as a plain process (no sanitizer, no signature) and count OK/FAIL cases."""
    build = target.build
    overrides = {"params": params} if params is not None else {}
    shown = f"{label} /{params}/" if params is not None else label
    try:
        context = template_context(entry, step, binaries=build.binaries if build else {},
                                   build_dir=build.build_dir if build else None,
                                   source_dir=build.source_dir if build else None,
                                   scratch=run_dir.scratch, overrides=overrides)
        planned = render_step(step, context)
    except TemplateProblem as exc:
        return NumericResult(shown, params, problem=str(exc))
    if not planned.commands:
        return NumericResult(shown, params, problem=f"step {step.name!r} has no command")
    stdout, results = [], []
    started = time.monotonic()
    for j, argv in enumerate(planned.commands):
        name = f"{label}-{j + 1}" if params is None else f"{label}-wide-{j + 1}"
        try:
            result = run_command(list(argv), timeout=step.timeout, log_dir=run_dir.logs, name=name,
                                 env_overrides=planned.env or None, tty=step.tty)
        except CommandNotFound as exc:
            return NumericResult(shown, params, problem=str(exc))
        except CommandInterrupted:
            raise KeyboardInterrupt from None
        results.append(result)
        stdout.append(result.stdout_text())
        if not result.ok:
            break
    report = parse_backend_ops("".join(stdout))
    last = results[-1]
    return NumericResult(
        label=shown, params=params, executed=report.executed, passed=report.passed, failed=report.failed,
        not_supported=report.not_supported, finished=report.finished, exit=last.describe(),
        process_ok=all(r.ok for r in results), duration_s=time.monotonic() - started, log=str(last.combined_path),
        failures=tuple(c.case_string for c in report.failures()[:10]),
    )
