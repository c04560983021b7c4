"""From one attempt's observations to its verdict. The rules, in order:

1. every signature matcher matched → confirmed (quoting the matched lines);
2. interrupted, a log cut by a refused write (a full disk), or timed out → inconclusive
   (the partial logs are kept; a signature's absence from a cut log proves nothing);
3. the sanitizer did not finish its report, or reported its own failure → inconclusive;
4. backend-ops: no matching case executed. All of them "not supported" → not-applicable (the
   backend refuses them, so the defect's kernel is never reached), unless the range places the
   tree inside it (then inconclusive: the two disagree). None, or fewer than
   ``min_cases`` → not-applicable only when the entry's affected range says the defect
   cannot be in this tree (fixed, or outside every range); inside a range, or when the
   range cannot place the tree, → inconclusive: nothing ran, and nothing shows the
   defect absent (engine.verdict.presence says what would exercise it); none listed at all by a step
   whose defect is one of its cases (``absent_when_unlisted``) → not-applicable, quoting why;
5. the path did not run as a healthy build runs it (`expect` not seen, a different
   abort, an unexpected exit, other sanitizer findings) → inconclusive, showing what happened;
6. a relative matcher could not compare (a figure missing in the step or its comparison
   arm) → inconclusive, saying which arm lacked what;
7. the detector's control has not passed on this machine → inconclusive;
8. otherwise → not-reproduced, saying what executed, what the relative matchers measured
   and which control passed;
9. a sanitizer step's would-be not-reproduced asks the launch-proof gate (engine.evidence.launch_proof):
   no kernel the entry is about compiled into the build → not-applicable, inside an affected
   range too (the symbols are build evidence that the defect cannot run; the reason names the
   range); compiled but none launched → inconclusive; a scan's case that launched none →
   not-applicable for that case.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence

from kvdiag.controls.gate import Gate
from kvdiag.engine.evidence.launch_proof import LaunchContext, judge_launch
from kvdiag.engine.evidence.matchers import UNDETERMINED, Match, match
from kvdiag.engine.evidence.observe import ArmReading, Observations
from kvdiag.engine.verdict.presence import refused_everywhere, unexercised, unlisted, with_range
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.parse.launches import distinct_kernels
from kvdiag.parse.sanitizer import instantiations, site_label
from kvdiag.parse.text import cut_note
from kvdiag.proc.sanitizer import SANITIZER_ERROR_EXITCODE
from kvdiag.records.ranges import RangeEvidence
from kvdiag.registry.entry import Entry, matchers_for


def judge_attempt(entry: Entry, obs: Observations, gate: Gate | Callable[[], Gate], index: int,
                  duration_s: float, log_dir: str | None = None, presence: RangeEvidence | None = None,
                  comparison: Callable[[], ArmReading] | None = None, launch: LaunchContext | None = None) -> Attempt:
    """The attempt's verdict. ``gate`` may be a callable: it is only consulted (and a
    control only run) when the verdict would otherwise be not-reproduced; so is the
    launch-proof gate (engine.evidence.launch_proof), for a sanitizer step, with ``launch``. ``presence``: what
    the entry's affected ranges say about the tree (None: not evaluated, which places nothing).
    ``comparison`` reads the step's comparison arm (running it the first time) for relative matchers."""
    if comparison is not None:
        obs = replace(obs, comparison=comparison)
    matches = [match(m, obs) for m in matchers_for(entry, obs.step.name)]
    verdict, reason = _decide(entry, obs, matches, gate, presence)
    proof = None
    if verdict is Verdict.NOT_REPRODUCED and obs.step.sanitizer:
        verdict, reason, proof = _launch_gate(entry, obs, reason, launch, presence)
    evidence = extract_evidence(obs, matches)
    if obs.lines_cut:
        reason, evidence = f"{reason}; {cut_note(obs.lines_cut)}", replace(evidence, lines_cut=obs.lines_cut)
    if obs.tail_only:
        reason += f"; only the last {obs.tail_only // 1_000_000} MB of each output was judged {obs.tail_why}"
    if obs.launch_listed or proof:
        evidence = replace(evidence, launched=distinct_kernels(obs.launches), launch_proof=proof,
                           launch_listing=(obs.launch_lister or "launch probe") if obs.launch_listed else None)
    return Attempt(step=obs.step.name, index=index, verdict=verdict, reason=reason, evidence=evidence,
                   commands=tuple(r.to_dict() for r in obs.results), duration_s=duration_s, log_dir=log_dir)


def _decide(entry: Entry, obs: Observations, matches: Sequence[Match],
            gate: Gate | Callable[[], Gate], presence: RangeEvidence | None) -> tuple[Verdict, str]:
    if matches and all(m.matched for m in matches):
        return Verdict.CONFIRMED, "; ".join(m.detail for m in matches)
    if obs.interrupted:
        return Verdict.INCONCLUSIVE, "interrupted before the signature matched (partial logs kept)"
    cut = log_cut(obs.results)
    if cut:
        return Verdict.INCONCLUSIVE, f"{cut}; the signature did not match in the part kept, which says nothing of the rest"
    if obs.timed_out:
        last = next(r for r in obs.results if r.timed_out)
        running = _running_case(obs)
        where = f" while running {running}" if running else ""
        spent = f": the step exceeded its {obs.budget_s:g} s budget" if obs.budget_s and last.quiet_s is None else ""
        return Verdict.INCONCLUSIVE, (f"{last.describe()}{spent}{where}; the signature did not match in the "
                                      f"partial output (partial log kept: logs/{last.combined_path.name})")
    step = obs.step
    if step.kind == "build-check":
        if obs.stale is None:
            return Verdict.INCONCLUSIVE, f"staleness could not be determined: {obs.stale_detail}"
        gate = gate() if callable(gate) else gate
        if not gate.allowed:
            return Verdict.INCONCLUSIVE, f"the dry run found nothing to rebuild, but {gate.reason}"
        said = obs.stale_detail.splitlines()[0] if obs.stale_detail.strip() else "dry run found nothing to rebuild"
        return Verdict.NOT_REPRODUCED, f"the build is current with its sources ({said}); {gate.reason}"
    problem = _sanitizer_problem(obs)
    if problem:
        return Verdict.INCONCLUSIVE, problem
    if step.kind == "backend-ops":
        refused = _all_refused(obs)
        if refused:
            return refused_everywhere(refused, presence)
        none_ran = _no_cases(obs)
        if none_ran and step.absent_when_unlisted and not (obs.backend_ops and obs.backend_ops.cases):
            return unlisted(step, none_ran, presence)
        if none_ran:
            return unexercised(entry, obs.step, none_ran, presence)
    odd = _abnormal(obs)
    if odd:
        return Verdict.INCONCLUSIVE, odd
    unsure = next((m for m in matches if m.extra.get(UNDETERMINED)), None)
    if unsure is not None:
        return Verdict.INCONCLUSIVE, f"the signature could not be judged: {unsure.detail}"
    if callable(gate):
        gate = gate()
    if not gate.allowed:
        return Verdict.INCONCLUSIVE, f"the signature did not match, but {gate.reason}"
    measured = "".join(f" ({m.detail})" for m in matches if m.matcher.type == "relative")
    return Verdict.NOT_REPRODUCED, f"{_what_ran(obs)}; the signature did not match{measured}; {gate.reason}"


def log_cut(results: Sequence) -> str | None:
    """What a refused log write cost these commands, in one clause; None when every log is whole."""
    cut = [r for r in results if getattr(r, "log_cut", 0)]
    if not cut:
        return None
    worst = max(cut, key=lambda r: r.log_cut)
    return (f"the log was cut: {worst.log_cut} bytes of output never reached logs/{worst.combined_path.name} "
            f"({worst.log_error or 'the write was refused'})")


def _launch_gate(entry: Entry, obs: Observations, reason: str, launch: LaunchContext | None,
                 presence: RangeEvidence | None) -> tuple[Verdict, str, str]:
    """Rule 7's last question: did a kernel the entry is about run under the detector? A build that
    compiled none of them is not-applicable even inside an affected range (the symbols are build
    evidence that the defect cannot run here; the reason names the range beside it); one that compiled
    them without launching any stays inconclusive (engine.evidence.launch_proof)."""
    judged = judge_launch(entry, obs.launches, obs.launch_listed, launch, tool=obs.step.sanitizer)
    if judged.verdict is None:
        return Verdict.NOT_REPRODUCED, f"{reason}; {judged.text}", judged.text
    said = f"{_what_ran(obs)}; the signature did not match, but {judged.text}"
    if judged.verdict is Verdict.NOT_APPLICABLE:
        said = with_range(said, presence)
    return judged.verdict, said, judged.text


def _sanitizer_problem(obs: Observations) -> str | None:
    report = obs.sanitizer
    if report is None:
        return None
    if report.tool_errors:
        return f"compute-sanitizer reported its own failure: {report.tool_errors[0]}"
    if not report.has_summary:
        return "compute-sanitizer did not finish its report (no summary line): its silence proves nothing"
    return None


def _quiet_walk(obs: Observations) -> bool:
    """The walk ended normally without starting a case it did not finish: its counts mean what they say."""
    report = obs.backend_ops
    if report is not None and report.running_case is not None:
        return False  # a case started: whatever happened is not "nothing matched"
    return not _abnormal(obs)  # a death or misbehaviour (maybe in an unprinted case): rule 5 shows that


def _all_refused(obs: Observations) -> str | None:
    """Every matching case printed `not supported`: the backend refuses them, its kernel never runs."""
    report = obs.backend_ops
    matched = len(report.cases) if report else 0
    if matched and report.executed == 0 and _quiet_walk(obs):
        return f"all {matched} matching case(s) are not supported by this backend"
    return None


def _no_cases(obs: Observations) -> str | None:
    """Why too few matching cases ran (none listed, or fewer than ``min_cases``), or None."""
    report = obs.backend_ops
    params = obs.step.vars.get("params", "")
    matched = len(report.cases) if report else 0
    executed = report.executed if report else 0
    if not _quiet_walk(obs):
        return None
    if matched == 0:
        return f"no {obs.step.vars.get('op', '')} test case matches /{params}/ in this build (0 cases)"
    if 0 < executed < obs.step.min_cases:
        return f"only {executed} matching case(s) executed, {obs.step.min_cases} needed"
    return None


def _abnormal(obs: Observations) -> str | None:
    """A failure that is not the signature: a different abort, exit or finding."""
    step = obs.step
    last = obs.last
    if step.expect:
        missing = [p for p in step.expect if not re.search(p, obs.combined, re.M)]
        if not missing:
            return None
        unseen = ", ".join(f"/{p}/" for p in missing)
        return f"the path did not run as expected: {unseen} not seen ({last.describe() if last else 'nothing ran'})"
    report = obs.sanitizer
    if report is not None and (report.findings or report.error_count):
        sites = ", ".join(site_label(s) for s in report.sites[:3])
        return f"a different sanitizer finding: {report.error_count or report.printed_count} error(s) at {sites}"
    failing = next((r for r in obs.results if not r.ok), None)
    if failing is None:
        return None
    if report is not None and failing.returncode == SANITIZER_ERROR_EXITCODE and not report.findings:
        return None
    running = _running_case(obs)
    abort = obs.aborts[0].message if obs.aborts else None
    text = f"a different failure: {failing.describe()}"
    if abort:
        text += f" ({abort})"
    if running:
        text += f" while running {running}"
    return text


def _running_case(obs: Observations) -> str | None:
    """The case a dead process was running, as precisely as the output allows.

    Older test-backend-ops printed a case's name before running it (then the
    unfinished line names it); current ggml prints it only after the case ran,
    so an abort can only be placed after the last case that finished. A run of
    exactly one case (scan, or a single-case regex) needs neither.
    """
    report = obs.backend_ops
    if report is None:
        return None
    if report.running_case is not None:
        return report.running_case.case_string
    failed = any(not r.ok for r in obs.results)
    if failed and not report.finished and report.last_case is not None:
        return f"the case after {report.last_case.case_string} (the last one that finished)"
    return None


def _what_ran(obs: Observations) -> str:
    report = obs.backend_ops
    if report is not None:
        return f"{report.executed} matching case(s) executed ({report.passed} OK, {report.failed} FAIL)"
    if obs.step.expect:
        seen = "; ".join(quote_seen(p, obs.combined) for p in obs.step.expect)
        return f"the expected path ran (seen: {seen}; {obs.last.describe()})"
    return f"the command ran to completion ({obs.last.describe()})"


def quote_seen(pattern: str, text: str) -> str:
    """The line an ``expect`` pattern matched, quoted (the pattern itself when it matched no text,
    e.g. a negative lookahead)."""
    m = re.search(pattern, text, re.M)
    if m is None or m.start() == m.end():
        return f"/{pattern}/"
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return repr(text[start:end if end >= 0 else len(text)].strip())


def extract_evidence(obs: Observations, matches: Sequence[Match]) -> Evidence:
    """Everything worth quoting from this attempt, whether or not it matched."""
    report = obs.sanitizer
    backend = obs.backend_ops
    quoted: list[str] = []
    for m in matches:
        if m.matched:
            quoted.extend(m.quoted)
    sites = tuple(
        {"site": site_label(s), "kind": s.kind, "kernel": s.kernel_name, "file": s.file, "line": s.line,
         "count": s.count, "blocks": s.blocks, "template_args": list(s.template_args)}
        for s in (report.sites if report else ())
    )
    failed_cases = tuple(
        {"case": c.case_string, "status": c.status,
         "metrics": [{"name": x.name, "value": x.value, "threshold": x.threshold} for x in c.metrics]}
        for c in (backend.cases if backend else ()) if c.metrics or c.status == "FAIL"
    )
    last = obs.last
    return Evidence(
        quoted=tuple(quoted),
        error_count=report.error_count if report else None,
        sites=sites,
        instantiations=instantiations(report) if report else (),
        case_metrics=failed_cases,
        aborts=tuple({"kind": a.kind, "message": a.message, "detail": a.detail, "file": a.file, "line": a.line}
                     for a in obs.aborts[:5]),
        running_case=_running_case(obs),
        last_finished_case=backend.last_case.params if backend and backend.last_case else None,
        cases_matched=len(backend.cases) if backend else None,
        cases_executed=backend.executed if backend else None,
        cases_failed=backend.failed if backend else None,
        cases_not_supported=backend.not_supported if backend else None,
        exit=last.describe() if last else None,
        matched=tuple(m.matcher.describe() for m in matches if m.matched),
        unmatched=tuple(f"{m.matcher.describe()}: {m.detail}" for m in matches if not m.matched),
    )
