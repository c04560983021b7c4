"""The launch-proof gate: a sanitizer's silence counts only for kernels that ran under it.

A would-be `not-reproduced` from a sanitizer rests on "matching cases executed and the
tool's control passed". That says nothing about whether the kernel the entry is about
ran: a build may route the shapes elsewhere, or not contain the instantiation at all.
The launch probe lists every kernel launched (kvdiag.parse.launches), so the gate asks:

1. Which kernels is the entry about? Its ``[[radius]]`` kernels for this tree (else for
   any tree), else what its sanitizer signatures' ``kernel`` regexes match.
2. Did one of them launch in this run? Then not-reproduced stands, naming them.
3. None launched: is one compiled into the build (kvdiag.workspace.kernel_symbols)?
   None compiled → `not-applicable`, quoting the symbol listing (the build cannot have
   the defect there), but only for kernels the entry names as launched: the radius'
   ``__global__`` instantiations, or a signature regex that a measured radius shows
   matching one. A signature's ``kernel`` regex names the function the detector reports,
   which may be a device function inlined into its kernel (racecheck names
   ``block_reduce`` inside ``soft_max_f32``): it has no symbol and no launch of its own,
   so matching none says nothing, and not-reproduced stands, saying the launch was not
   checked. Compiled but not launched → `inconclusive` with the reason; for
   one case of a scan → `not-applicable` for that case ("this case does not reach it"),
   since the case space of a scan routes most shapes to other kernels by design.
4. Launches were not listed (the probe could not be built, a server step): a symbol
   listing with none of them → not-applicable; otherwise not-reproduced stands, saying
   that the launch was not proven and why.

The gate runs in :func:`kvdiag.engine.verdict.judge.judge_attempt` at rule 7, after the controls
gate and before the not-reproduced is returned; it never turns anything else into
not-reproduced.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable

from kvdiag.records.verdict import Verdict
from kvdiag.parse.launches import distinct_kernels
from kvdiag.registry.entry import Entry
from kvdiag.registry.radius import radius_kernels, tables_for

SHOW = 4   # kernels named in a reason before "and N more"


@dataclass(frozen=True)
class EntryKernels:
    """What the entry is about: exact canonical kernels, or regexes over kernel names."""

    exact: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exact or self.patterns)

    def matches(self, kernel: str) -> bool:
        if self.exact:
            return kernel in self.exact
        return any(re.search(p, kernel) for p in self.patterns)

    def describe(self) -> str:
        if self.exact:
            return "the radius' kernels (" + names(self.exact) + ")"
        return "kernels matching " + ", ".join(f"/{p}/" for p in self.patterns)


@dataclass(frozen=True)
class LaunchJudgement:
    verdict: Verdict | None      # None: not-reproduced stands
    text: str                    # the reason's launch sentence


def names(kernels, show: int = SHOW) -> str:
    kernels = list(kernels)
    head = ", ".join(kernels[:show])
    return head + (f" and {len(kernels) - show} more" if len(kernels) > show else "")


@dataclass(frozen=True)
class LaunchContext:
    """What the gate needs beyond the attempt's output: the build's kernel listing (lazy),
    the tree's commit (to pick its radius), and whether the attempt is one case of a scan."""

    symbols: Callable | None = None
    commit: str | None = None
    per_case: bool = False


def launch_context(target, *, per_case: bool) -> LaunchContext:
    """What the gate reads from the target (engine.verdict.target.Target): its kernel listing and its commit."""
    git = getattr(target.build, "git", None) if target.build is not None else None
    return LaunchContext(symbols=target.kernel_symbols, commit=getattr(git, "commit", None), per_case=per_case)


def family_patterns(entry: Entry) -> tuple[str, ...]:
    """The kernel regexes of the entry's sanitizer signatures, each once: its kernel family."""
    return tuple(dict.fromkeys(m.kernel for m in entry.signature if m.type == "sanitizer" and m.kernel))


def entry_kernels(entry: Entry, commit: str | None = None, *, family: bool = False) -> EntryKernels:
    """The radius' kernels measured on this very commit; else (or with ``family``) the kernel
    regexes of the entry's sanitizer signatures. A radius of another tree is not used: a fork
    may spell the same kernel with other template arguments."""
    patterns = family_patterns(entry)
    if family and patterns:
        return EntryKernels(patterns=patterns)
    exact = radius_kernels(tables_for(entry.radius, commit, strict=True), None) if commit else ()
    if exact:
        return EntryKernels(exact=exact)
    return EntryKernels(patterns=patterns)


def named_as_launched(entry: Entry, about: EntryKernels) -> bool:
    """Whether the entry names these kernels as launched (``__global__`` kernels): the radius' kernels
    are the launched instantiations a scan measured; a signature's ``kernel`` regex names the function
    the detector reports, which may be a device function inlined into its kernel (``block_reduce`` in
    ``soft_max_f32``), so it counts only where a measured radius shows it matching a launched kernel."""
    if about.exact:
        return True
    measured = [k for table in entry.radius for key in ("kernels", "clean_kernels") for k in table.get(key) or ()]
    return any(about.matches(k) for k in measured)


def _device_function(about: EntryKernels, launched, listing, tool: str | None) -> str:
    """The launch sentence of a regex that matches no kernel symbol of this build and that the entry does
    not name as launched: it may be a device function (no symbol, no launch of its own), so neither the
    launches nor the symbols can say whether its code ran; the cases that ran are what the verdict rests on."""
    seen = f"launched under {tool}: {names(launched)}" if launched else "launches not listed"
    where = listing.describe()
    return (f"launch not checked: {about.describe()}: none among this build's __global__ symbols ({where}), and "
            f"the entry names no launched kernel (a [[radius]] kernel): a device function inlined into its kernel "
            f"has no symbol and no launch of its own ({seen})")


def compiled_kernels(listing, about: EntryKernels) -> tuple[str, ...]:
    """The listing's kernels the entry is about, worked out once per listing and entry: a route phase asks
    for every case that reached none of them (902 cases of D2's hsk scan, each 4.6 ms against ggml's 6201
    kernels on the CPU host, all in the seconds after the route processes end)."""
    try:
        return _compiled_kernels(listing, about)
    except TypeError:       # a listing that cannot be a key (a test's stand-in): worked out each time
        return tuple(k for k in listing.kernels if about.matches(k))


@functools.lru_cache(maxsize=16)
def _compiled_kernels(listing, about: EntryKernels) -> tuple[str, ...]:
    return tuple(k for k in listing.kernels if about.matches(k))


def judge_launch(entry: Entry, launches, listed: bool, context: LaunchContext | None, *,
                 tool: str | None) -> LaunchJudgement:
    """The gate's answer for one attempt whose verdict would be not-reproduced."""
    context = context or LaunchContext()
    symbols, per_case = context.symbols, context.per_case
    about = entry_kernels(entry, context.commit, family=per_case)
    if not about:
        return LaunchJudgement(None, "the entry names no kernel: launches not checked")
    launched = distinct_kernels(launches)
    hit = [k for k in launched if about.matches(k)]
    if listed and hit:
        return LaunchJudgement(None, f"launched under {tool}: {names(hit)}")
    listing = symbols() if symbols is not None else None
    compiled = list(compiled_kernels(listing, about)) if listing is not None and listing.listed else None
    if compiled == [] and not named_as_launched(entry, about):
        return LaunchJudgement(None, _device_function(about, launched, listing, tool))
    if compiled == []:
        return LaunchJudgement(Verdict.NOT_APPLICABLE, f"this build contains no kernel the entry is about "
                                                       f"({about.describe()}): {listing.describe()}")
    if not listed:
        why = listing.describe() if listing is not None else "no symbol listing"
        return LaunchJudgement(None, f"launch not proven: launches were not listed in this run ({why})")
    ran = names(launched) if launched else "no kernel"
    if per_case:
        return LaunchJudgement(Verdict.NOT_APPLICABLE, f"this case launched no kernel the entry is about "
                                                       f"(launched: {ran})")
    where = (f"{len(compiled)} compiled ({names(compiled)}), by {listing.tool}" if compiled
             else "symbols not listed")
    return LaunchJudgement(Verdict.INCONCLUSIVE, f"none of {about.describe()} launched in this run "
                                                 f"(launched: {ran}; {where})")
