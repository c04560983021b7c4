"""Ordered probe stacks: ``requires`` resolved into an apply order, and a dry run of it.

A stack is applied in order, each probe on top of the ones before it, so each
one is checked (``git apply --check``) against the tree *with the earlier ones
applied*, not against the pristine commit. When one does not apply, kvdiag
says exactly what it conflicts with: the commit itself (it does not apply there
even alone), or the earlier probe(s) of the stack whose changes it collides
with — with git's own ``error: patch failed: file:line`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from kvdiag.errors import ProbeError, StackCycle
from kvdiag.probes.patch import Probe, ProbeSet
from kvdiag.probes.worktree import ApplyResult, Worktree, scratch_worktree


def order_stack(names: Iterable[str], probes: ProbeSet) -> tuple[Probe, ...]:
    """The probes named and everything they require, each required probe before its dependants.

    The order of ``names`` is kept where ``requires`` leaves it free; a cycle is a
    StackCycle naming it (``a -> b -> a``); an unknown name is a ProbeError.
    """
    ordered: list[Probe] = []
    done: set[str] = set()

    def visit(probe: Probe, path: list[str]) -> None:
        if probe.name in done:
            return
        if probe.name in path:
            cycle = path[path.index(probe.name):] + [probe.name]
            raise StackCycle(f"probes require each other in a cycle: {' -> '.join(cycle)}")
        for req in probe.requires:
            try:
                required = probes.get(req)
            except ProbeError:
                raise ProbeError(f"probe {probe.name!r} requires {req!r}, which is not a known probe") from None
            visit(required, path + [probe.name])
        done.add(probe.name)
        ordered.append(probe)

    for name in names:
        visit(probes.get(name), [])
    return tuple(ordered)


@dataclass(frozen=True)
class Conflict:
    """Why one probe of a stack does not apply."""

    probe: Probe
    errors: tuple[str, ...]               # git's error lines on the stacked tree
    with_probes: tuple[Probe, ...] = ()   # earlier probes it collides with; () with `alone_fails`
    alone_fails: bool = False             # it does not apply to the commit even by itself

    def describe(self, commit: str) -> str:
        if self.alone_fails or not self.with_probes:
            what = f"the commit {commit[:12]} itself (it does not apply even alone)"
        else:
            what = ", ".join(p.name for p in self.with_probes)
        return f"{self.probe.name} conflicts with {what}"


@dataclass(frozen=True)
class StackCheck:
    """The dry run of a stack on a scratch worktree of one commit."""

    commit: str
    order: tuple[Probe, ...]
    results: tuple[ApplyResult, ...]
    conflict: Conflict | None

    @property
    def ok(self) -> bool:
        return self.conflict is None

    def lines(self) -> list[str]:
        """What `kvdiag probe check` prints."""
        out = []
        for result in self.results:
            where = f" (--directory={result.directory})" if result.directory else ""
            out.append(f"{'ok  ' if result.ok else 'FAIL'} {result.probe.name}{where}")
        if self.conflict is not None:
            out.append(self.conflict.describe(self.commit) + ":")
            out.extend(f"  {line}" for line in self.conflict.errors)
        return out


def check_stack(source: Path, commit: str, stack: Sequence[Probe], *, log_dir: Path) -> StackCheck:
    """``git apply --check`` of each probe in order, each on top of the ones before it.

    Runs in a temporary worktree of ``source`` at ``commit``, removed afterwards.
    """
    results: list[ApplyResult] = []
    with scratch_worktree(source, commit, log_dir=log_dir) as worktree:
        for i, probe in enumerate(stack):
            checked = worktree.check(probe)
            results.append(checked)
            if not checked.ok:
                conflict = explain_conflict(worktree, probe, stack[:i], checked)
                return StackCheck(worktree.commit, tuple(stack), tuple(results), conflict)
            applied = worktree.apply(probe)
            if not applied.ok:   # --check passed but the apply did not: report git's words
                results[-1] = applied
                return StackCheck(worktree.commit, tuple(stack), tuple(results),
                                  Conflict(probe, applied.errors, tuple(stack[:i])))
        return StackCheck(worktree.commit, tuple(stack), tuple(results), None)


def explain_conflict(worktree: Worktree, probe: Probe, earlier: Sequence[Probe],
                     failed: ApplyResult) -> Conflict:
    """Which earlier probes make ``probe`` fail.

    First ``probe`` on the commit with only what it requires applied: failing
    there, it conflicts with the commit. Otherwise each other earlier probe (with
    what that one requires) is applied under it in turn; those that make it fail
    are the ones it conflicts with.
    """
    own = [p for p in _closure(probe, [*earlier, probe]) if p.name != probe.name]
    if not _applies_on(worktree, probe, own):
        return Conflict(probe, failed.errors, (), alone_fails=True)
    culprits: list[Probe] = []
    for other in earlier:
        if other in own:
            continue
        base = _closure(other, earlier)
        names = {p.name for p in base} | {p.name for p in own}
        if not _applies_on(worktree, probe, [p for p in earlier if p.name in names]):
            culprits.append(other)
    worktree.reset()
    return Conflict(probe, failed.errors, tuple(culprits) or tuple(p for p in earlier if p not in own))


def _applies_on(worktree: Worktree, probe: Probe, base: Sequence[Probe]) -> bool:
    """Does ``probe`` apply after ``base`` on the pristine commit? (True when ``base`` itself does not.)"""
    worktree.reset()
    for p in base:
        if not worktree.apply(p).ok:
            return True   # the base itself does not go in: no evidence against ``probe``
    return worktree.check(probe).ok


def _closure(probe: Probe, stack: Sequence[Probe]) -> list[Probe]:
    """``probe`` and the probes of ``stack`` it requires, in stack order."""
    by_name = {p.name: p for p in stack}
    wanted: set[str] = set()

    def add(p: Probe) -> None:
        if p.name in wanted:
            return
        wanted.add(p.name)
        for req in p.requires:
            if req in by_name:
                add(by_name[req])

    add(probe)
    return [p for p in stack if p.name in wanted]
