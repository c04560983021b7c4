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
   a finding of a related entry's signature, or a racecheck warning, is not a different one
   (parse.set_apart): a not-reproduced then names what it set apart;
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

from dataclasses import replace
from typing import Callable

from kvdiag.controls.gate import Gate
from kvdiag.engine.evidence.launch_proof import LaunchContext, judge_launch
from kvdiag.engine.evidence.matchers import UNDETERMINED, Match, match
from kvdiag.engine.evidence.observe import (ArmReading, Observations, abnormal, log_cut, observed_evidence,
                                            running_case, sanitizer_problem, set_apart_note, unreached_cases,
                                            what_ran)
from kvdiag.engine.verdict.presence import unreached, with_range
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.parse.launches import distinct_kernels
from kvdiag.parse.text import cut_note
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
    if entry.neighbours:      # the related entries' signatures: data the rules read from the observations
        obs = replace(obs, neighbours=entry.neighbours)
    verdict, reason, matches = _decide(entry, obs, gate, presence)
    evidence = replace(observed_evidence(obs), quoted=tuple(q for m in matches if m.matched for q in m.quoted),
                       matched=tuple(m.matcher.describe() for m in matches if m.matched),
                       unmatched=tuple(f"{m.matcher.describe()}: {m.detail}" for m in matches if not m.matched))
    proof = None
    if verdict is Verdict.NOT_REPRODUCED and obs.step.sanitizer:
        # rule 9: did a kernel the entry is about run under the detector? (engine.evidence.launch_proof)
        judged = judge_launch(entry, obs.launches, obs.launch_listed, launch, tool=obs.step.sanitizer)
        proof = judged.text
        if judged.verdict is None:
            reason = f"{reason}; {judged.text}"
        else:
            said = f"{what_ran(obs)}; the signature did not match, but {judged.text}"
            if judged.verdict is Verdict.NOT_APPLICABLE:   # build evidence, beside what the range says
                said = with_range(said, presence)
            verdict, reason = judged.verdict, said
    if obs.lines_cut:
        reason, evidence = f"{reason}; {cut_note(obs.lines_cut)}", replace(evidence, lines_cut=obs.lines_cut)
    if obs.tail_only:
        reason += f"; only the last {obs.tail_only // 1_000_000} MB of each output was judged {obs.tail_why}"
    if obs.launch_listed or proof:
        evidence = replace(evidence, launched=distinct_kernels(obs.launches), launch_proof=proof,
                           launch_listing=(obs.launch_lister or "launch probe") if obs.launch_listed else None)
    return Attempt(step=obs.step.name, index=index, verdict=verdict, reason=reason, evidence=evidence,
                   commands=tuple(r.to_dict() for r in obs.results), duration_s=duration_s, log_dir=log_dir)


def _decide(entry: Entry, obs: Observations, gate: Gate | Callable[[], Gate],
            presence: RangeEvidence | None) -> tuple[Verdict, str, list[Match]]:
    """Rules 1 to 8, in order, with the signature's matches they rest on."""
    matches = [match(m, obs) for m in matchers_for(entry, obs.step.name)]

    def ruled(verdict: Verdict, reason: str) -> tuple[Verdict, str, list[Match]]:
        return verdict, reason, matches

    if matches and all(m.matched for m in matches):
        return ruled(Verdict.CONFIRMED, "; ".join(m.detail for m in matches))
    if obs.interrupted:
        return ruled(Verdict.INCONCLUSIVE, "interrupted before the signature matched (partial logs kept)")
    cut = log_cut(obs.results)
    if cut:
        return ruled(Verdict.INCONCLUSIVE,
                     f"{cut}; the signature did not match in the part kept, which says nothing of the rest")
    if obs.timed_out:
        last = next(r for r in obs.results if r.timed_out)
        running = running_case(obs)
        where = f" while running {running}" if running else ""
        spent = f": the step exceeded its {obs.budget_s:g} s budget" if obs.budget_s and last.quiet_s is None else ""
        return ruled(Verdict.INCONCLUSIVE, f"{last.describe()}{spent}{where}; the signature did not match in the "
                                           f"partial output (partial log kept: logs/{last.combined_path.name})")
    step = obs.step
    if step.kind == "build-check":
        if obs.stale is None:
            return ruled(Verdict.INCONCLUSIVE, f"staleness could not be determined: {obs.stale_detail}")
        gate = gate() if callable(gate) else gate
        if not gate.allowed:
            return ruled(Verdict.INCONCLUSIVE, f"the dry run found nothing to rebuild, but {gate.reason}")
        said = obs.stale_detail.splitlines()[0] if obs.stale_detail.strip() else "dry run found nothing to rebuild"
        return ruled(Verdict.NOT_REPRODUCED, f"the build is current with its sources ({said}); {gate.reason}")
    problem = sanitizer_problem(obs)
    if problem:
        return ruled(Verdict.INCONCLUSIVE, problem)
    found = unreached_cases(obs) if step.kind == "backend-ops" else None
    if found is not None:
        return ruled(*unreached(entry, step, found.why, presence, refused=found.refused,
                                    none_listed=found.none_listed))
    odd = abnormal(obs)
    if odd:
        return ruled(Verdict.INCONCLUSIVE, odd)
    unsure = next((m for m in matches if m.extra.get(UNDETERMINED)), None)
    if unsure is not None:
        return ruled(Verdict.INCONCLUSIVE, f"the signature could not be judged: {unsure.detail}")
    if callable(gate):
        gate = gate()
    if not gate.allowed:
        return ruled(Verdict.INCONCLUSIVE, f"the signature did not match, but {gate.reason}")
    measured = "".join(f" ({m.detail})" for m in matches if m.matcher.type == "relative")
    apart = set_apart_note(obs)
    apart = f"; {apart}" if apart else ""
    return ruled(Verdict.NOT_REPRODUCED,
                 f"{what_ran(obs)}; the signature did not match{measured}{apart}; {gate.reason}")
