"""What the affected range does to a verdict: before running, when no case ran, after running.

**When no test case reaches the defect**: the verdict the range allows, and what would reach it.

"0 matching cases" says the build's tests do not exercise the defect; it does not
say the defect is absent. D11 before its fix is the case in point: the kernel
asserts F32 and the CUDA backend claims F16, but that era's test-backend-ops has
no F16 CONCAT case. So:

- the range says the defect cannot be here (fixed, or outside every range) →
  not-applicable, with the range's evidence;
- the range places the tree inside → inconclusive, "present by range, not
  exercised by this build's tests", naming the case or probe that would exercise it;
- the range cannot place the tree (no .git, a shallow clone, no range for an
  unidentified repository) → inconclusive as well: nothing shows the defect absent.

"The feature is absent in the source" is the other way to not-applicable; the
``[applies]`` conditions say that before anything runs (engine.verdict.applicability).

**Before running** (`before_running`): a source fact that says "absent" while the
range says "inside" is a contradiction, not a verdict: a build inside an affected
range is never not-applicable, so it is inconclusive, naming both.

**After running** (`after_running`): a not-reproduced in a tree the range says is
fixed carries that note; a confirmed defect in a tree the range calls fixed, or a
clean run inside a range, is a disagreement the verdict warns about. The one
not-applicable a range does not overturn is the launch-proof gate's "this build
compiled no kernel the entry is about" (engine.evidence.launch_proof): the build's own symbols
say the defect's code cannot run, whatever the history says; a kernel compiled but not
launched stays inconclusive.
"""

from __future__ import annotations

from typing import Sequence

from kvdiag.records.ranges import RangeEvidence
from kvdiag.records.verdict import Attempt, Verdict
from kvdiag.registry.entry import Entry, Step

__all__ = ["PRESENT_UNEXERCISED", "after_running", "before_running", "built_without", "exercise_hint",
           "refused_everywhere", "unexercised", "unlisted", "unreached", "with_range"]

PRESENT_UNEXERCISED = "present by range, not exercised by this build's tests"


def unreached(entry: Entry, step: Step, why: str, presence: RangeEvidence | None, *, refused: bool = False,
              none_listed: bool = False) -> tuple[Verdict, str]:
    """The verdict of a walk that reached too few matching cases (``why``): every one ``refused`` by the
    backend, ``none_listed`` at all (the program printed no matching case), or too few run."""
    if refused:
        return refused_everywhere(why, presence)
    if none_listed and step.absent_when_unlisted:
        return unlisted(step, why, presence)
    return unexercised(entry, step, why, presence)


def unexercised(entry: Entry, step: Step, why: str, presence: RangeEvidence | None) -> tuple[Verdict, str]:
    """The verdict of a walk that ran normally but reached too few matching cases (``why``)."""
    if presence is not None and presence.says_absent:
        return Verdict.NOT_APPLICABLE, f"{why}; {presence.summary}"
    hint = exercise_hint(entry, step)
    if presence is not None and presence.says_present:
        return Verdict.INCONCLUSIVE, f"{PRESENT_UNEXERCISED}: {why}; {presence.summary}; {hint}"
    placed = presence.summary if presence is not None else "the affected range was not evaluated"
    return Verdict.INCONCLUSIVE, (f"not exercised by this build's tests, and nothing shows the defect absent: {why}; "
                                  f"{placed}; {hint}")


def unlisted(step: Step, why: str, presence: RangeEvidence | None) -> tuple[Verdict, str]:
    """The program listed no case of a step whose defect is one of its cases (``absent_when_unlisted``):
    its case list, compiled from the tree's own tests and read in the build's case format, is a
    source fact that says "absent", so not-applicable quoting it, unless the range places the tree
    inside (then the two disagree, as for any source fact)."""
    reason = f"{why}: {step.absent_when_unlisted}"
    if presence is not None and presence.says_present:
        return Verdict.INCONCLUSIVE, _disagree(presence, reason)
    return Verdict.NOT_APPLICABLE, with_range(reason, presence)


def exercise_hint(entry: Entry, step: Step) -> str:
    """What would make this step reach the defect on this tree: the case it needs, and the probe adding it."""
    op, params = step.vars.get("op"), step.vars.get("params")
    wanted = f"a {op} case matching /{params}/" if op and params else f"a case of step {step.name!r}"
    if step.exercise_probe:
        name = step.exercise_probe
        return (f"would exercise it: {wanted}; probe {name} adds such cases to test-backend-ops (kvdiag probe "
                f"apply {name} --source <tree> --into <dir>, build test-backend-ops there, run {entry.id} on it)")
    return f"would exercise it: {wanted}, which this build's test-backend-ops does not list"


def refused_everywhere(why: str, presence: RangeEvidence | None) -> tuple[Verdict, str]:
    """Every matching case printed "not supported": the backend never runs the defect's kernel, which
    is not-applicable, unless the range says the defect is in this tree (then the two disagree)."""
    if presence is not None and presence.says_present:
        return Verdict.INCONCLUSIVE, _disagree(presence, why)
    return Verdict.NOT_APPLICABLE, with_range(why, presence)


def _disagree(presence: RangeEvidence, why: str) -> str:
    return (f"{presence.summary}, but {why}: the entry's range or its source fact is out of date, and a build "
            f"inside an affected range is never not-applicable (`kvdiag registry verify` checks the facts)")


def with_range(reason: str, presence: RangeEvidence | None) -> str:
    """``reason`` with the range's one line after it when the range places the tree (an unknown
    range adds nothing to a reason; every verdict shows it on its own line anyway)."""
    if presence is None or not (presence.says_absent or presence.says_present):
        return reason
    return f"{reason}; {presence.summary}"


def before_running(judgement, presence: RangeEvidence) -> tuple[Verdict, str]:
    """The verdict of an applicability judgement (not-applicable, skipped, inconclusive), with the range."""
    verdict = Verdict(judgement.verdict)
    if verdict is not Verdict.NOT_APPLICABLE:
        return verdict, judgement.reason
    if judgement.basis == "source" and presence.says_present:
        return Verdict.INCONCLUSIVE, _disagree(presence, judgement.reason)
    if judgement.basis == "build":
        return verdict, judgement.reason      # this build's configuration or GPU: the range is beside the point
    return verdict, with_range(judgement.reason, presence)


def after_running(verdict: Verdict, reason: str, warnings: list[str], presence: RangeEvidence, *,
                  built_without: bool = False) -> tuple[Verdict, str, list[str]]:
    """The verdict, reason and warnings of a run, with what the range adds. A not-applicable that a
    step reached on its own (a compile step's source file absent) inside an affected range is the
    same disagreement as before running. ``built_without``: the not-applicable rests on the build's
    kernel listing (no kernel the entry is about was compiled in, engine.evidence.launch_proof): that is build
    evidence that the defect cannot run here, so it stands inside a range, with a warning."""
    warnings = list(warnings)
    if verdict is Verdict.NOT_APPLICABLE and presence.says_present and built_without:
        warnings.append(f"{presence.summary}, but this build compiled no kernel the entry is about")
        return verdict, reason, warnings
    if verdict is Verdict.NOT_APPLICABLE and presence.says_present:
        return Verdict.INCONCLUSIVE, _disagree(presence, reason), warnings
    if verdict is Verdict.NOT_REPRODUCED and presence.says_absent:
        reason = f"{reason}; {presence.summary}"
    elif verdict is Verdict.NOT_REPRODUCED and presence.says_present:
        warnings.append(f"{presence.summary}, yet this run did not reproduce it")
    elif verdict is Verdict.CONFIRMED and presence.says_absent:
        warnings.append(f"the signature matched although the range says {presence.summary}: the entry's range, "
                        f"or this tree's history, is wrong")
    return verdict, reason, warnings


def built_without(attempts: Sequence[Attempt]) -> bool:
    """Every not-applicable attempt rests on the launch-proof gate: the build compiled no kernel the
    entry is about (engine.verdict.judge rule 9), build evidence that holds inside an affected range too
    (``after_running``'s ``built_without``)."""
    refused = [a for a in attempts if a.verdict is Verdict.NOT_APPLICABLE]
    return bool(refused) and all(a.evidence.launch_proof for a in refused)
