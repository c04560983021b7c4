"""One attempt of a step, once through the pipeline: plan → attempt → observe → judge.

A step that runs programs (a command list, or llama-server) is planned into argv
(engine.verdict.planning), its processes run (engine.verdict.processes), what they printed is
parsed once (engine.evidence.observe) and judged (engine.verdict.judge). A build-check step runs
nothing: its observation is the target's staleness dry run. A compile step builds in a kept
scratch tree, its own attempt stage (engine.verdict.compile_check). Each stage is called once,
with the value the one before returned; `kvdiag run`, its comparison arm, the attribution of a
dead walk and a scan's cases all come through here.
"""

from __future__ import annotations

import time
from dataclasses import replace

from kvdiag.controls.gate import Gate, GateProvider
from kvdiag.engine.evidence.launch_proof import launch_context
from kvdiag.engine.evidence.observe import JUDGED_TAIL, observe, observe_staleness
from kvdiag.engine.verdict.compile_check import attempt_compile
from kvdiag.engine.verdict.devices import describe, gpu_lease
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.verdict.launch_program import launch_listed, listed_without_sanitizer
from kvdiag.engine.verdict.planning import RunOptions, plan_step
from kvdiag.engine.verdict.processes import not_run, run_commands, run_server, step_budget
from kvdiag.engine.verdict.target import Target
from kvdiag.errors import AttemptInterrupted, TemplateProblem
from kvdiag.home import kvdiag_home
from kvdiag.progress import Progress
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.registry.entry import Entry, Step
from kvdiag.server import completion_requests
from kvdiag.store.runs import RunDir

#: step kinds whose attempt stage is not processes planned from argv templates
OWN_ATTEMPT = ("build-check", "compile")


def attempt_step(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
                 options: RunOptions, gate_provider: GateProvider, name_prefix: str | None = None) -> Attempt:
    """Run one attempt of a step (all its commands) and judge it. Raises AttemptInterrupted on Ctrl-C,
    with the attempt judged from what the processes left. With ``options.device`` the processes see
    only that GPU and the attempt names it."""
    attempt = _attempt(entry, step, target, run_dir, index, label, options, gate_provider, name_prefix)
    if options.device is not None:
        attempt = replace(attempt, device=describe(options.device))
    return attempt


def _attempt(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
             options: RunOptions, gate_provider: GateProvider, name_prefix: str | None) -> Attempt:
    """The stages in order, each once, as the step's kind has them."""
    started, progress = time.monotonic(), options.progress or Progress()
    if step.kind not in OWN_ATTEMPT:
        try:
            planned = plan_step(entry, step, target, run_dir, options)
        except TemplateProblem as exc:
            return not_run(step, index, Verdict.SKIPPED, str(exc))
        server, name = step.kind == "server", name_prefix or f"{step.name}-{index}"
        lease = gpu_lease(entry, target, options)
        budget = step_budget(step, options.step_budget)
        if server:
            ran = run_server(planned, target.sanitizer, run_dir.logs, name, budget,
                             completion_requests({**step.vars, **options.overrides}), lease=lease,
                             progress=progress, label=label, cancel=options.cancel)
        else:
            ran = run_commands(planned, target.sanitizer, run_dir.logs, name, budget, started=started, lease=lease,
                               progress=progress, label=label, cancel=options.cancel)
        started += ran.waited_s       # its duration and budget count from when its process could start
        if ran.not_started is not None:
            return not_run(step, index, Verdict.SKIPPED, ran.not_started)
        # a server's observation has no budget, and one cut short is judged without its listing
        obs = observe(step, ran.results, ran.sanitizer_logs, None if server else budget,
                      False if server and ran.interrupted else launch_listed(planned),
                      JUDGED_TAIL if ran.interrupted else None)
        if ran.interrupted:
            raise AttemptInterrupted(judge_attempt(entry, obs, Gate(False, "interrupted"), index,
                                                   time.monotonic() - started, str(run_dir.logs)))
        launch = None if server else launch_context(target, per_case=options.scan_case)   # what the launch gate reads
        if not server and not options.scan_case:        # a scan's cases are listed by its route phase
            with gpu_lease(entry, target, options):
                obs = listed_without_sanitizer(obs, planned, target, run_dir.logs,
                                               f"{name_prefix or step.name}-{index}", budget, options.cancel)
        # The gate is lazy: only a would-be not-reproduced consults it (it may cost a canary run).
        return judge_attempt(entry, obs, lambda: gate_provider(step.sanitizer), index, time.monotonic() - started,
                             str(run_dir.logs), presence=target.range_evidence(entry), comparison=options.comparison,
                             launch=launch)
    if step.kind == "build-check":
        # The target's staleness answer is the one source: "current" there carries the control's proof
        # (engine.verdict.target.proven), anything the control did not prove is already "not checked".
        staleness = target.build.staleness if target.build is not None else None
        stale = staleness.stale if staleness is not None and staleness.checked else None
        detail = "\n".join(staleness.evidence_lines()).strip() if staleness is not None else "no build given"
        proof = staleness.proof if staleness is not None else None
        gate = Gate(True, proof) if proof else Gate(False, "no staleness control proved this dry run on this machine")
        return judge_attempt(entry, observe_staleness(step, stale, detail), gate, index, time.monotonic() - started)
    budget = step_budget(step, options.step_budget)     # compile: a kept scratch build, only the named objects
    progress.start(label, budget_s=budget)
    try:
        return attempt_compile(entry, step, target.build, kvdiag_home(), run_dir.logs, index, budget_s=budget,
                               on_output=progress.line, say=lambda text: progress.say(f"{label}: {text}"),
                               cancel=options.cancel)
    finally:
        progress.stop()
