"""Running an entry against a target: applicability, attempts, judging, recording.

The run directory is written before anything starts and finished atomically at
the end; every command's output streams into its logs as it arrives, so a run
that is killed, interrupted or crashes still leaves what happened on disk.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Mapping

from kvdiag import __version__
from kvdiag.engine.verdict.applicability import judge_applicability
from kvdiag.engine.verdict.arm import arm_record
from kvdiag.engine.verdict.processes import compiles, line_env, not_run, sanitizer_invocation, step_budget
from kvdiag.engine.verdict.case_forms import adapt_entry, case_format_of, format_note
from kvdiag.engine.verdict.comparison import ComparisonArm, describe_comparison
from kvdiag.engine.verdict.devices import describe, gpu_lease
from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.verdict.launch_program import launch_listed, listed_without_sanitizer
from kvdiag.engine.evidence.launch_proof import launch_context
from kvdiag.engine.evidence.observe import JUDGED_TAIL, observe, observe_staleness
from kvdiag.engine.verdict.planning import RunOptions, TemplateProblem, plan_step
from kvdiag.engine.verdict.presence import after_running, before_running
from kvdiag.engine.verdict.site_check import check_site, place_in_tree
from kvdiag.engine.verdict.target import Target
from kvdiag.records.verdict import Attempt, Outcome, Verdict, aggregate
from kvdiag.controls.gate import GateProvider
from kvdiag.errors import AttemptInterrupted, KvdiagError, RunInterrupted, UsageError
from kvdiag.fileio import write_atomic
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.proc.signals import interruption
from kvdiag.progress import Progress
from kvdiag.records.run import RunRecord, log_truncation
from kvdiag.registry.entry import Entry, Step, matchers_for
from kvdiag.server import completion_requests, run_server_attempt
from kvdiag.store.runs import RunDir
from kvdiag.workspace.tree import Tree

def pick_step(entry: Entry, name: str | None) -> Step:
    if name is None:
        return entry.default_step
    step = entry.step(name)
    if step is None:
        raise UsageError(f"{entry.id} has no step {name!r} (steps: {', '.join(s.name for s in entry.steps)})")
    if not matchers_for(entry, step.name):
        judged = next((s.name for s in entry.steps if s.compare_with == step.name), None)
        if judged is not None:
            raise UsageError(f"{entry.id} step {name!r} has no signature: it is the comparison arm of step "
                             f"{judged!r} and runs with it (kvdiag run {entry.id} --step {judged})")
        raise UsageError(f"{entry.id} step {name!r} has no signature: it is informational, not a verdict")
    return step


def run_entry(entry: Entry, target: Target, run_dir: RunDir, *, options: RunOptions,
              gate_provider: GateProvider) -> Outcome:
    """One verdict for one entry; raises RunInterrupted (after recording) on Ctrl-C. The entry's case
    regexes are first put in the form this build's test-backend-ops prints (engine.verdict.case_forms)."""
    written, entry = entry, adapt_entry(entry, case_format_of(target))
    step, started = pick_step(entry, options.step), time.monotonic()
    n = options.runs or step.runs
    header = RunRecord(entry=entry.id, status="running", fields={
        "kvdiag_version": __version__, "step": step.name, "target": target.to_dict(),
        "overrides": dict(options.overrides), **options.record,
        "arm": arm_record(entry, step, target, runs=n, overrides=options.overrides)})
    run_dir.write_record(header)
    presence = target.range_evidence(entry)
    judgement = judge_applicability(entry, step, target.facts())
    warnings = [*judgement.warnings, *judgement.notes, *presence.notes, *format_note(written, entry, target)]
    if target.build is not None and target.build.staleness.stale:
        warnings.append(f"the build is stale against its sources ({target.build.staleness.pending_count} "
                        f"step(s) pending, {target.build.staleness.tool}): results may not reflect the source")
    early = _without_running(entry, step, judgement, presence, options, warnings, started)
    if early is not None:
        _finish(run_dir, header, early)
        return early
    attempts: list[Attempt] = []
    arm = _comparison_arm(entry, step, target, run_dir, options, gate_provider)
    if arm is not None:
        options = replace(options, comparison=arm.read)
    try:
        for index in range(1, n + 1):
            label = f"{entry.id} [{step.name}] run {index}/{n}"
            attempt = attempt_step(entry, step, target, run_dir, index, label, options, gate_provider)
            if options.cancelled or (arm is not None and arm.interrupted):
                raise AttemptInterrupted(attempt)  # another thread stopped this run, or Ctrl-C in the comparison arm
            attempts.append(attempt)
    except AttemptInterrupted as exc:
        attempts.append(exc.attempt)
        verdict, reason = Verdict.INCONCLUSIVE, f"interrupted by the user ({interruption()}); partial logs kept"
        if any(a.verdict is Verdict.CONFIRMED for a in attempts):
            # The signature matched in a run that finished: that stays true when a later run is cut short.
            verdict, reason = aggregate([a for a in attempts if a.verdict is Verdict.CONFIRMED])
            reason += f" (interrupted during run {len(attempts)} of {n})"
        outcome = Outcome(entry.id, verdict, reason, tuple(attempts), tuple(warnings), step.name,
                          time.monotonic() - started, {"interrupted": True}, range=presence)
        _finish(run_dir, header, outcome)
        raise RunInterrupted(outcome) from None
    except KvdiagError:
        raise
    except Exception as exc:  # kvdiag's own failure: an `error` verdict, recorded, never a lost run
        import traceback

        write_atomic(run_dir.path / "error.txt", traceback.format_exc())
        outcome = Outcome(entry.id, Verdict.ERROR, f"kvdiag failed while running the step: {type(exc).__name__}: "
                          f"{exc} (traceback in {run_dir.path / 'error.txt'})", tuple(attempts), tuple(warnings),
                          step.name, time.monotonic() - started, range=presence)
        _finish(run_dir, header, outcome)
        return outcome
    verdict, reason = aggregate(attempts)
    extra, interrupted = _attribute(entry, step, target, run_dir, attempts, verdict, options, gate_provider)
    interrupted = interrupted or options.cancelled
    if extra.get("case"):
        reason += f"; {describe_case(extra['case'])}"
    if not interrupted and arm is not None:
        comparison = arm.summary(verdict)
        if comparison is not None:
            extra = {**extra, "comparison": comparison}
            if not _measured_in_reason(entry, step, verdict):
                reason += f"; {describe_comparison(comparison)}"
        interrupted = arm.interrupted or options.cancelled
    notes, site = site_notes(entry, target, attempts, verdict, options)
    warnings += notes
    extra = {**extra, **({"site": site} if site else {})}
    verdict, reason, warnings = after_running(verdict, reason, warnings, presence,
                                              built_without=_built_without(attempts))
    extra = {**extra, **({"interrupted": True} if interrupted else {})}
    outcome = Outcome(entry.id, verdict, reason, tuple(attempts), tuple(dict.fromkeys(warnings + _cut(attempts))),
                      step.name, time.monotonic() - started, extra, range=presence)
    _finish(run_dir, header, outcome)
    if interrupted:
        raise RunInterrupted(outcome)
    return outcome


def _without_running(entry: Entry, step: Step, judgement, presence, options: RunOptions, warnings: list[str],
                     started: float) -> Outcome | None:
    """The outcome of a step that is not run: not applicable or not required here (engine.verdict.presence
    weighs that against the range), or a compile step under --skip-builds; None when it runs."""
    if judgement.verdict is not None:
        verdict, reason = before_running(judgement, presence)
    elif options.skip_builds and compiles(step):
        verdict, reason = Verdict.SKIPPED, f"its step {step.name!r} compiles code: build checks skipped (--skip-builds)"
    else:
        return None
    return Outcome(entry.id, verdict, reason, (), tuple(warnings), step.name, time.monotonic() - started,
                   range=presence)


def _built_without(attempts: list[Attempt]) -> bool:
    """Every not-applicable attempt rests on the launch-proof gate: the build compiled no kernel the
    entry is about (engine.verdict.judge rule 9), build evidence that holds inside an affected range too."""
    refused = [a for a in attempts if a.verdict is Verdict.NOT_APPLICABLE]
    return bool(refused) and all(a.evidence.launch_proof for a in refused)


def _cut(attempts: list[Attempt]) -> list[str]:
    """The warning a run gets when a refused write cut its logs (the verdict may not rest on them)."""
    cut = log_truncation(attempts)
    if cut is None:
        return []
    return [f"{cut['bytes_lost']} bytes of output never reached the logs ({cut['error']}): what the verdict "
            "read was cut short (log_truncated in run.json)"]


def site_notes(entry: Entry, target: Target, attempts: list[Attempt], verdict: Verdict,
               options: RunOptions) -> tuple[list[str], dict | None]:
    """The notes and the site record of the outcome: a confirmation's (compared with what the detector
    printed), else the site placed by its context alone (engine.verdict.site_check.place_in_tree), as `registry
    verify` places it; nothing for a scan's case (the scan places nothing per case)."""
    if verdict is Verdict.CONFIRMED:
        return confirmed_notes(entry, target, attempts)
    if options.scan_case:
        return [], None
    return [], place_in_tree(entry, Tree.from_build_info(target.build) if target.build is not None else Tree(None))


def confirmed_notes(entry: Entry, target: Target, attempts: list[Attempt]) -> tuple[list[str], dict | None]:
    """A confirmation's notes: sites printed without file:line, and whether the printed site is the
    registry's site for this tree (engine.verdict.site_check; its placement is returned for the outcome)."""
    notes = []
    if any(a.evidence.sites and all(s.get("file") is None for s in a.evidence.sites) for a in attempts):
        notes.append("sites lack file:line (no -lineinfo): confirmed on kind and kernel only")
    tree = Tree.from_build_info(target.build) if target.build is not None else Tree(None)
    site, note = check_site(entry, tree, attempts)
    return notes + ([note] if note else []), site


def _attribute(entry: Entry, step: Step, target: Target, run_dir: RunDir, attempts: list[Attempt],
               verdict: Verdict, options: RunOptions, gate_provider: GateProvider) -> tuple[dict, bool]:
    """The options' attribution hook, if any; a Ctrl-C during it keeps the verdict and is recorded."""
    if options.attribute is None:
        return {}, False
    try:
        return options.attribute(entry, step, target, run_dir, attempts, verdict, options, gate_provider), False
    except AttemptInterrupted:
        return {"case": {"case": None, "why_not": "interrupted while re-running cases alone", "tried": []}}, True


def _comparison_arm(entry: Entry, step: Step, target: Target, run_dir: RunDir, options: RunOptions,
                    gate_provider: GateProvider) -> ComparisonArm | None:
    """The step's comparison arm (engine.verdict.comparison), if it has one; a Ctrl-C during it keeps the
    judged step's verdict and is recorded (the arm says it was interrupted)."""
    arm = entry.step(step.compare_with) if step.compare_with else None
    if arm is None:
        return None

    def attempt(arm_step: Step) -> tuple[Attempt, bool]:
        try:
            return attempt_step(entry, arm_step, target, run_dir, 1, f"{entry.id} [{arm_step.name}] comparison arm",
                                replace(options, comparison=None), gate_provider), False
        except AttemptInterrupted as exc:
            return exc.attempt, True
    return ComparisonArm(arm, run_dir, attempt)


def _measured_in_reason(entry: Entry, step: Step, verdict: Verdict) -> bool:
    """Whether the reason already quotes the comparison arm's line: a relative matcher's text is
    in every confirmed and not-reproduced reason of its step (engine.verdict.judge)."""
    relative = any(m.type == "relative" and m.arm == step.compare_with for m in matchers_for(entry, step.name))
    return relative and verdict in (Verdict.CONFIRMED, Verdict.NOT_REPRODUCED)


def describe_case(found: Mapping[str, Any]) -> str:
    """One line for the verdict's reason: the case, or why none was found, and what the search cost."""
    cost = f"{len(found.get('tried') or ())} process(es), {found.get('wall_s') or 0:.1f} s on top of the run"
    if found.get("case"):
        return f"case: {found['case']} (reproduced alone; {cost})"
    return f"case not found: {found.get('why_not')} ({cost})"


def attempt_step(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
                 options: RunOptions, gate_provider: GateProvider, name_prefix: str | None = None) -> Attempt:
    """Run one attempt of a step (all its commands) and judge it. Raises AttemptInterrupted on Ctrl-C.

    With ``options.device`` the processes see only that GPU and the attempt names it."""
    attempt = _attempt_step(entry, step, target, run_dir, index, label, options, gate_provider, name_prefix)
    if options.device is not None:
        attempt = replace(attempt, device=describe(options.device))
    return attempt


def _attempt_step(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
                  options: RunOptions, gate_provider: GateProvider, name_prefix: str | None) -> Attempt:
    progress = options.progress or Progress()
    started = time.monotonic()
    if step.kind == "build-check":
        # The target's staleness answer is the one source: "current" there carries the control's proof
        # (engine.verdict.target.proven), anything the control did not prove is already "not checked".
        staleness = target.build.staleness if target.build is not None else None
        stale = staleness.stale if staleness is not None and staleness.checked else None
        obs = observe_staleness(step, stale, _staleness_detail(staleness))
        proof = staleness.proof if staleness is not None else None
        gate = Gate(True, proof) if proof else Gate(False, "no staleness control proved this dry run on this machine")
        return judge_attempt(entry, obs, gate, index, time.monotonic() - started)
    if step.kind == "compile":
        return _attempt_compile(entry, step, target, run_dir, index, label, options)
    if step.kind == "server":
        return _attempt_server(entry, step, target, run_dir, index, label, options, gate_provider, name_prefix,
                               started)
    try:
        planned = plan_step(entry, step, target, run_dir, options)
    except TemplateProblem as exc:
        return not_run(step, index, Verdict.SKIPPED, str(exc))
    results, sanitizer_logs = [], []
    invocation = sanitizer_invocation(step)
    lease = gpu_lease(entry, target, options)
    budget = step_budget(step, options.step_budget)
    progress.start(label, budget_s=budget)
    try:
        with lease:
            for j, command in enumerate(planned.commands):
                name = f"{name_prefix or step.name + '-' + str(index)}" + (
                    f"-{j + 1}" if len(planned.commands) > 1 else "")
                argv = tuple(command)
                if invocation is not None:
                    log = run_dir.logs / f"{name}.sanitizer.log"
                    sanitizer_logs.append(log)
                    argv = invocation.argv(target.sanitizer, log, command)
                # the step's budget covers all its commands (a configure and its build)
                left = budget if j == 0 else max(1.0, budget - (time.monotonic() - started))
                try:
                    result = run_command(argv, timeout=left, log_dir=run_dir.logs, name=name,
                                         env_overrides=line_env(step, planned.env), tty=step.tty,
                                         on_output=progress.line,
                                         cancel=options.cancel)
                except CommandInterrupted as exc:
                    results.append(exc.result)
                    obs = observe(step, results, sanitizer_logs, budget, launch_listed(planned), JUDGED_TAIL)
                    raise AttemptInterrupted(judge_attempt(entry, obs, Gate(False, "interrupted"), index,
                                                     time.monotonic() - started, str(run_dir.logs))) from None
                except CommandNotFound as exc:
                    return not_run(step, index, Verdict.SKIPPED, str(exc))
                results.append(result)
                if not result.ok and j + 1 < len(planned.commands):
                    break
    finally:
        progress.stop()
    obs = observe(step, results, sanitizer_logs, budget, launch_listed(planned))
    if not options.scan_case:        # a scan's cases are listed by its route phase
        with gpu_lease(entry, target, options):
            obs = listed_without_sanitizer(obs, planned, target, run_dir.logs, f"{name_prefix or step.name}-{index}",
                                           budget, options.cancel)
    duration = time.monotonic() - started
    # The gate is lazy: only a would-be not-reproduced consults it (it may cost a canary run).
    return judge_attempt(entry, obs, lambda: gate_provider(step.sanitizer), index, duration, str(run_dir.logs),
                         presence=target.range_evidence(entry), comparison=options.comparison,
                         launch=launch_context(target, per_case=options.scan_case))


def _attempt_server(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
                    options: RunOptions, gate_provider: GateProvider, name_prefix: str | None,
                    started: float) -> Attempt:
    """A server step: start llama-server (under the sanitizer if the step has one), send the
    step's requests, stop it; its logs are judged like any command's."""
    progress = options.progress or Progress()
    try:
        planned = plan_step(entry, step, target, run_dir, options)
    except TemplateProblem as exc:
        return not_run(step, index, Verdict.SKIPPED, str(exc))
    name = name_prefix or f"{step.name}-{index}"
    argv = tuple(planned.commands[0])
    sanitizer_logs = []
    invocation = sanitizer_invocation(step)
    if invocation is not None:
        log = run_dir.logs / f"{name}.sanitizer.log"
        sanitizer_logs.append(log)
        argv = invocation.argv(target.sanitizer, log, argv)
    budget = step_budget(step, options.step_budget)
    progress.start(label, budget_s=budget)
    try:
        with gpu_lease(entry, target, options):
            result, _server = run_server_attempt(
                step, argv, planned.env or None, run_dir.logs, name, timeout=budget,
                requests=completion_requests({**step.vars, **options.overrides}),
                on_output=progress.line, cancel=options.cancel, wrapped=invocation is not None)
    except CommandInterrupted as exc:
        obs = observe(step, [exc.result], sanitizer_logs, tail_only=JUDGED_TAIL)
        raise AttemptInterrupted(judge_attempt(entry, obs, Gate(False, "interrupted"), index,
                                         time.monotonic() - started, str(run_dir.logs))) from None
    except CommandNotFound as exc:
        return not_run(step, index, Verdict.SKIPPED, str(exc))
    finally:
        progress.stop()
    obs = observe(step, [result], sanitizer_logs, launch_listed=launch_listed(planned))   # the CUPTI lister's
    return judge_attempt(entry, obs, lambda: gate_provider(step.sanitizer), index,
                         time.monotonic() - started, str(run_dir.logs), presence=target.range_evidence(entry),
                         comparison=options.comparison)


def _attempt_compile(entry: Entry, step: Step, target: Target, run_dir: RunDir, index: int, label: str,
                     options: RunOptions) -> Attempt:
    """A compile step (engine.verdict.compile_check): a kept scratch build, only the named objects compiled."""
    from kvdiag.engine.verdict.compile_check import CompileInterrupted, attempt_compile
    from kvdiag.home import kvdiag_home

    progress = options.progress or Progress()
    budget = step_budget(step, options.step_budget)
    progress.start(label, budget_s=budget)
    try:
        return attempt_compile(entry, step, target.build, kvdiag_home(), run_dir.logs, index, budget_s=budget,
                               on_output=progress.line, say=lambda text: progress.say(f"{label}: {text}"),
                               cancel=options.cancel)
    except CompileInterrupted as exc:
        raise AttemptInterrupted(exc.attempt) from None
    finally:
        progress.stop()


def _staleness_detail(staleness) -> str:
    if staleness is None:
        return "no build given"
    return "\n".join(staleness.evidence_lines()).strip()


def _finish(run_dir: RunDir, header: RunRecord, outcome: Outcome) -> None:
    interrupted = outcome.extra.get("interrupted") or any(
        command.get("interrupted") for attempt in outcome.attempts for command in attempt.commands)
    status = "interrupted" if interrupted else "finished"
    run_dir.write_record(header.with_status(status, outcome=outcome))
