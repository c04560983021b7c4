"""The relative matcher: a figure of the judged step against the same figure of its comparison arm.

An absolute threshold is calibrated to the machine, model and context it was
measured on. D5's host compute buffer was 2,195.90 MiB with the seed's 27B model
and 956.40 MiB with a 13 MiB synthesized one; against the same server with a
q8_0 cache (20.28 and 9.79 MiB) both are about 100 times larger, and that ratio
is the defect. So the matcher reads a number from the step's output (the
pattern's named group ``value``), reads the same pattern's number from the
comparison arm that ran in the same `kvdiag run` (same build, model and
machine), and compares the two by ratio or difference.

When several lines match in one arm (a server prints a compute buffer per
context it sets up: the target's, a draft or MTP context's), ``pick`` says which
counts; the default ``max`` compares the largest figure of each arm.

A figure missing on either side is not a negative result: the match is then
*undetermined*, and the judge makes the verdict inconclusive with the reason
(which arm lacked what), never not-reproduced.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvdiag.engine.evidence.observe import Observations
from kvdiag.registry.entry import Matcher

@dataclass(frozen=True)
class Figure:
    """A number read from one printed line."""

    value: float
    text: str      # the number as printed
    line: str      # the whole line, stripped


def figures(pattern: str, text: str) -> list[Figure]:
    """Every line of ``text`` where ``pattern`` matches with a readable ``value`` group, in order."""
    compiled = re.compile(pattern)
    found = []
    for line in text.splitlines():
        m = compiled.search(line)
        if m is None or m.group("value") is None:
            continue
        printed = m.group("value").strip()
        try:
            value = float(printed.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            found.append(Figure(value, printed, line.strip()))
    return found


def pick(found: list[Figure], how: str) -> Figure:
    if how == "first":
        return found[0]
    if how == "last":
        return found[-1]
    chooser = min if how == "min" else max
    return chooser(found, key=lambda f: f.value)


def compare(m: Matcher, mine: Figure, theirs: Figure) -> tuple[bool, str]:
    """(holds, the comparison in words) for the matcher's threshold."""
    unit = f" {m.unit}" if m.unit else ""
    if m.ratio_min is not None:
        if theirs.value == 0:
            held = mine.value > 0
            said = "the comparison arm's figure is 0: the ratio is unbounded" if held else "both figures are 0"
        else:
            ratio = mine.value / theirs.value
            held = ratio >= m.ratio_min
            said = f"{ratio:.1f}× ({'at least' if held else 'less than'} the {m.ratio_min:g}× that confirms)"
        return held, said
    difference = mine.value - theirs.value
    held = difference >= m.difference_min
    return held, (f"{difference:+g}{unit} ({'at least' if held else 'less than'} the "
                  f"{m.difference_min:g}{unit} that confirms)")


@dataclass(frozen=True)
class Outcome:
    """``held`` None: undetermined (a figure is missing), ``detail`` says which arm lacked what."""

    held: bool | None
    detail: str
    quoted: tuple[str, ...] = ()
    values: tuple[float, float] | None = None    # (the step's figure, the arm's figure)


def judge_relative(m: Matcher, obs: Observations) -> Outcome:
    """Does the step's figure stand to its comparison arm's as the matcher asks? (See the module's text.)"""
    mine = figures(m.pattern, obs.stream(m.stream))
    if not mine:
        return Outcome(None, f"the {obs.step.name} arm printed no /{m.pattern}/ line: no figure to compare")
    reading = obs.comparison() if obs.comparison is not None else None
    if reading is None:
        return Outcome(None, f"the comparison arm {m.arm} did not run here: no figure to compare against")
    if not reading.ran:
        return Outcome(None, f"the comparison arm {m.arm} {reading.why}: no figure to compare against")
    theirs = figures(m.pattern, reading.stream(m.stream))
    if not theirs:
        return Outcome(None, f"the comparison arm {m.arm} printed no /{m.pattern}/ line ({reading.exit}): "
                             "no figure to compare against")
    a, b = pick(mine, m.pick), pick(theirs, m.pick)
    held, said = compare(m, a, b)
    unit = f" {m.unit}" if m.unit else ""
    detail = (f"{obs.step.name}: {a.text}{unit} ({a.line!r}) against {m.arm}: {b.text}{unit} ({b.line!r}): {said}"
              f"{_several(mine, theirs, m.pick)}")
    return Outcome(held, detail, (a.line, b.line) if held else (), (a.value, b.value))


def _several(mine: list[Figure], theirs: list[Figure], how: str) -> str:
    if len(mine) == 1 and len(theirs) == 1:
        return ""
    return f"; the {how} of {len(mine)} and {len(theirs)} matching line(s)"
