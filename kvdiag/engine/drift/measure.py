"""`kvdiag drift`: how far off quantized FlashAttention numbers are, over repeated runs.

Upstream test-backend-ops draws new random inputs every run (no --seed); a fork's
takes --seed. Either way one run is one sample, so drift runs the cases N times
(or once per seed) and reports per case: runs, fails, the error values seen and
the margin to the threshold. test-backend-ops prints a case's error only when it
fails; the instrument probe `print-every-case-error` makes passing cases print
theirs too, and drift reads both forms (`ERR = x > t` and `ERR = x <= t`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.proc.runner import run_command
from kvdiag.progress import Progress
from kvdiag.registry.sections import DriftSpec
from kvdiag.store.runs import RunDir



@dataclass
class CaseDrift:
    case: str
    runs: int = 0
    fails: int = 0
    errors: list[float] = field(default_factory=list)
    threshold: float | None = None

    @property
    def fail_rate(self) -> float:
        return self.fails / self.runs if self.runs else 0.0

    @property
    def margin(self) -> float | None:
        """How far the worst error seen stays below the threshold, as a fraction of it (negative = over)."""
        if not self.errors or not self.threshold:
            return None
        return (self.threshold - max(self.errors)) / self.threshold

    def to_dict(self) -> dict[str, Any]:
        errs = sorted(self.errors)
        return {
            "case": self.case, "runs": self.runs, "fails": self.fails, "fail_rate": round(self.fail_rate, 4),
            "errors_seen": len(errs), "min": errs[0] if errs else None,
            "median": statistics.median(errs) if errs else None, "max": errs[-1] if errs else None,
            "threshold": self.threshold, "margin": None if self.margin is None else round(self.margin, 4),
        }


@dataclass
class DriftResult:
    op: str
    params: str
    runs: int
    seeded: bool
    cases: dict[str, CaseDrift] = field(default_factory=dict)
    run_results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def matched(self) -> int:
        return len(self.cases)

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "params": self.params, "runs": self.runs, "seeded": self.seeded,
                "matched_cases": self.matched, "cases": [c.to_dict() for c in self.cases.values()],
                "processes": self.run_results}


def case_error(case) -> tuple[float, float] | None:
    """The case's own error and threshold (the op's node, not views printed beside it)."""
    own = [m for m in case.metrics if m.name in ("ERR", "NMSE") and m.op in (None, case.op)]
    if not own:
        return None
    worst = max(own, key=lambda m: m.value)
    return worst.value, worst.threshold


def accumulate(result: "DriftResult", stdout: str) -> dict[str, Any]:
    """Fold one process's output into the per-case tallies; returns that run's counts."""
    report = parse_backend_ops(stdout)
    for case in report.cases:
        if case.status not in ("OK", "FAIL"):
            continue
        drift = result.cases.setdefault(case.case_string, CaseDrift(case=case.case_string))
        drift.runs += 1
        drift.fails += case.status == "FAIL"
        printed = case_error(case)
        if printed is not None:
            drift.errors.append(printed[0])
            drift.threshold = printed[1]
    # finished: the process printed its final verdict line (not cut short by an abort or a timeout)
    return {"executed": report.executed, "failed": report.failed, "finished": report.finished}


def run_drift(binary, run_dir: RunDir, *, op: str, params: str, runs: int, seeds: Sequence[str] = (),
              has_seed: bool = False, backend: str = "CUDA0", timeout: float = 600,
              progress: Progress | None = None) -> DriftResult:
    """Run the matching cases `runs` times (or once per seed when the binary takes --seed)."""
    progress = progress or Progress()
    seeded = bool(has_seed and seeds)
    plan = [("--seed", s) for s in seeds] if seeded else [None] * runs
    result = DriftResult(op=op, params=params, runs=len(plan), seeded=seeded)
    progress.begin("drift runs", len(plan))
    for i, seed in enumerate(plan, start=1):
        argv = [str(binary), "test", "-o", op, "-b", backend, "-p", params] + (list(seed) if seed else [])
        progress.start(f"drift run {i}/{len(plan)}", budget_s=timeout)
        try:
            cmd = run_command(argv, timeout=timeout, log_dir=run_dir.logs, name=f"drift-{i}", tty=True,
                              on_output=progress.line)
        finally:
            progress.stop()
        counts = accumulate(result, cmd.stdout_text())
        result.run_results.append({"index": i, "seed": seed[1] if seed else None, "exit": cmd.describe(), **counts})
        progress.advance(f"run {i}: {cmd.describe()}")
    progress.end()
    return result


def judge_drift(result: DriftResult, criterion: DriftSpec | None,
                absent: Callable[[str], tuple[str, str]] | None = None) -> tuple[str, str]:
    """A verdict from the entry's drift criterion (or a plain summary without one).

    ``absent``: how an entry's affected range judges "no case matched" (engine.verdict.presence); without
    an entry there is no defect to place, and nothing matching is not-applicable."""
    # A process that died or timed out is not "nothing matched", and its cases ran fewer times.
    unfinished = [r for r in result.run_results if r.get("finished") is False]
    if result.matched == 0 and not unfinished:
        why = f"no {result.op} case matches /{result.params}/ in this build (0 cases)"
        return absent(why) if absent is not None else ("not-applicable", why)
    failing = [c for c in result.cases.values() if c.fails]
    if criterion:
        need_fails = int(criterion.confirm_min_fails)
        need_err = float(criterion.confirm_min_err)
        hits = [c for c in failing if c.fails >= need_fails and c.errors and max(c.errors) >= need_err]
        if hits:
            worst = max(hits, key=lambda c: max(c.errors))
            return "confirmed", (f"{worst.case} failed {worst.fails}/{worst.runs} runs, "
                                 f"max ERR {max(worst.errors):.6g} > threshold {worst.threshold}")
    if unfinished:
        first = unfinished[0]
        return "inconclusive", (f"{len(unfinished)} of {len(result.run_results)} run(s) did not finish (run "
                                f"{first.get('index')}: {first.get('exit', 'no final result line')}); "
                                f"{result.matched} case(s) executed")
    if failing:
        return "inconclusive", f"{len(failing)} case(s) failed at least once, below the entry's confirm criterion"
    return "not-reproduced", f"{result.matched} case(s) executed {result.runs} time(s) each, no failure"
