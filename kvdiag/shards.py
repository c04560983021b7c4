"""Shards: which part of a sweep or scan one machine runs, and how a job engine names it.

kvdiag counts shards from 1: ``--shard i/n`` runs part i of n, 1 <= i <= n, and
shards 1..n of one selection cover it exactly once. ``--shard auto`` reads i and n
from the variables the job engine that started this process sets:

==========================  =========================  ============================  ==================
engine                      its index                  its count                     kvdiag's shard i
==========================  =========================  ============================  ==================
Slurm job array             ``SLURM_ARRAY_TASK_ID``    ``SLURM_ARRAY_TASK_COUNT``,   (ID - MIN) / STEP + 1
                                                       or ``SLURM_ARRAY_TASK_MIN``
                                                       and ``_MAX`` (``_STEP``)
Kubernetes Indexed Job      ``JOB_COMPLETION_INDEX``   ``KVDIAG_SHARD_COUNT``        index + 1
                            (from 0)                   (the manifest declares it)
GitLab ``parallel:``        ``CI_NODE_INDEX`` (from 1) ``CI_NODE_TOTAL``             index
==========================  =========================  ============================  ==================

Slurm sets MIN, MAX, COUNT and STEP beside the id; without ``SLURM_ARRAY_TASK_MIN``
the ids are taken to start at 0 (``--array=0-3``), so ``SLURM_ARRAY_TASK_ID=2
SLURM_ARRAY_TASK_COUNT=4`` is shard 3/4. An array whose ids are not MIN..MAX in
steps of STEP (``--array=1,4,9``) cannot be mapped and is refused. Kubernetes
does not tell a pod its Job's ``completions``, so the manifest sets
``KVDIAG_SHARD_COUNT`` to the same number. GitLab sets ``CI_NODE_TOTAL=1`` on
every job without ``parallel:``; that alone is not a shard. Missing or
contradictory variables, or two engines that disagree, are a UsageError that
names them.

A shard count is at most ``MAX_SHARDS`` (100000, Kubernetes' own limit on an Indexed Job's
completions; Slurm's default array size is 1001); a larger one, a ``SLURM_ARRAY_TASK_STEP`` of 0,
or a number written with other than the ASCII digits 0-9 is a UsageError too (issue 43: an id
and count of 10^23 made "a sweep of 0 entries" that exited 0).

A scan's cases are dealt by name alone (`case_shard`): a case's shard never
depends on the other cases the build lists, nor on the workers or batches.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from kvdiag.errors import UsageError

AUTO = "auto"
MAX_SHARDS = 100_000
#: the one variable kvdiag defines: a Kubernetes Indexed Job's count, set in its manifest
SHARD_COUNT_VARIABLE = "KVDIAG_SHARD_COUNT"
SLURM_ID, SLURM_COUNT = "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"
SLURM_MIN, SLURM_MAX, SLURM_STEP = "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"
K8S_INDEX = "JOB_COMPLETION_INDEX"
GITLAB_INDEX, GITLAB_TOTAL = "CI_NODE_INDEX", "CI_NODE_TOTAL"
SLURM_VARIABLES = (SLURM_ID, SLURM_COUNT, SLURM_MIN, SLURM_MAX, SLURM_STEP)
ENGINE_VARIABLES = {"slurm": SLURM_VARIABLES, "kubernetes": (K8S_INDEX, SHARD_COUNT_VARIABLE),
                    "gitlab": (GITLAB_INDEX, GITLAB_TOTAL)}
WHERE_FROM = (f"a Slurm job array ({SLURM_ID} with {SLURM_COUNT} or {SLURM_MIN}/{SLURM_MAX}), a Kubernetes "
              f"Indexed Job ({K8S_INDEX} with {SHARD_COUNT_VARIABLE}) or GitLab parallel: "
              f"({GITLAB_INDEX} with {GITLAB_TOTAL})")


@dataclass(frozen=True)
class Shard:
    """Part ``index`` of ``count`` (from 1), and where that came from."""

    index: int
    count: int
    engine: str | None = None                       # "slurm", "kubernetes", "gitlab"; None: given as i/n
    variables: Mapping[str, str] = field(default_factory=dict)   # the variables it was read from

    @property
    def text(self) -> str:
        return f"{self.index}/{self.count}"

    def origin(self) -> dict | None:
        """What a saved sweep or scan records about where the shard came from (None: typed)."""
        if self.engine is None:
            return None
        return {"engine": self.engine, "variables": dict(self.variables)}


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); a UsageError for anything that is not 1 <= i <= n."""
    match = re.fullmatch(r"\s*([0-9]{1,12})\s*/\s*([0-9]{1,12})\s*", text or "")
    if not match:
        raise UsageError(f"a shard is written i/n (e.g. 2/4) or auto, got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise UsageError(f"shard {text!r} is out of range: i/n needs 1 <= i <= n")
    if count > MAX_SHARDS:
        raise UsageError(f"shard {text!r} is out of range: at most {MAX_SHARDS} shards")
    return index, count


def resolve_shard(text: str | None, environ: Mapping[str, str]) -> Shard | None:
    """``--shard``'s value as a `Shard`: ``i/n`` as given, ``auto`` from ``environ``; None for none."""
    if text is None:
        return None
    if text.strip().lower() == AUTO:
        return shard_from_environment(environ)
    return Shard(*parse_shard(text))


def shard_from_environment(environ: Mapping[str, str]) -> Shard:
    """The shard the job engine of ``environ`` names; one UsageError line when none does, a
    variable is missing or malformed, or two engines disagree."""
    found = [s for s in (_slurm(environ), _kubernetes(environ), _gitlab(environ)) if s is not None]
    if not found:
        raise UsageError(f"--shard auto: no job engine's variables are set; kvdiag reads {WHERE_FROM}")
    first = found[0]
    for other in found[1:]:
        if (other.index, other.count) != (first.index, first.count):
            raise UsageError(f"--shard auto: {first.engine} says shard {first.text} ({_listed(first)}) but "
                             f"{other.engine} says {other.text} ({_listed(other)}): give --shard i/n")
    return first


@dataclass(frozen=True)
class Part:
    """One file given to `kvdiag merge`, as far as its shard goes."""

    shard: str | None
    interrupted: bool
    label: str                  # how to name it when it is no shard: "sweep #2 (started …)"


def complete_split(parts: Sequence[Part], command: str, what: str) -> int:
    """n, when ``parts`` are shards 1..n of one split, each once and none interrupted; else one
    UsageError naming the problem (a missing shard by its i/n). ``command`` makes the shards of
    ``what`` ("the selection", "the scan")."""
    split = []
    for part in parts:
        if not part.shard:
            raise UsageError(f"{part.label} is not a shard: merge takes the files of `{command} --shard i/n`")
        split.append(parse_shard(part.shard))
    counts = {n for _, n in split}
    if len(counts) != 1:
        raise UsageError(f"the shards split {what} differently: {', '.join(str(p.shard) for p in parts)}")
    count = counts.pop()
    indexes = [i for i, _ in split]
    repeated = sorted({i for i in indexes if indexes.count(i) > 1})
    if repeated:
        raise UsageError(f"shard(s) {', '.join(f'{i}/{count}' for i in repeated)} given more than once")
    missing = sorted(set(range(1, count + 1)) - set(indexes))
    if missing:
        raise UsageError(f"incomplete: shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing")
    interrupted = [str(p.shard) for p in parts if p.interrupted]
    if interrupted:
        raise UsageError(f"shard(s) {', '.join(interrupted)} were interrupted: run them again before merging")
    return count


def case_shard(case: str, count: int) -> int:
    """The shard (1..count) of a scan's case: a hash of its name, so the same on every machine."""
    digest = hashlib.sha256(case.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


# --------------------------------------------------------------------------- each engine


def _listed(shard: Shard) -> str:
    return ", ".join(f"{k}={v}" for k, v in shard.variables.items())


def _number(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return None
    if not re.fullmatch(r"[0-9]+", value.strip()):      # str.isdigit() also takes "٣" and "³"
        raise UsageError(f"--shard auto: {name}={value!r} is not a whole number (digits 0-9)")
    if len(value.strip()) > 12:
        raise UsageError(f"--shard auto: {name}={value.strip()} is out of range (at most 12 digits)")
    return int(value)


def _present(environ: Mapping[str, str], names) -> dict[str, str]:
    return {n: environ[n] for n in names if environ.get(n, "").strip() != ""}


def _shard(engine: str, index: int, count: int, variables: Mapping[str, str], how: str) -> Shard:
    listed = ", ".join(f"{k}={v}" for k, v in variables.items())
    if count < 1 or not 1 <= index <= count:
        raise UsageError(f"--shard auto: {listed} gives shard {index}/{count}, out of range ({how})")
    if count > MAX_SHARDS:
        raise UsageError(f"--shard auto: {listed} gives {count} shards, out of range (at most {MAX_SHARDS})")
    return Shard(index, count, engine, dict(variables))


def _slurm(environ: Mapping[str, str]) -> Shard | None:
    seen = _present(environ, SLURM_VARIABLES)
    if not seen:
        return None
    task, count = _number(environ, SLURM_ID), _number(environ, SLURM_COUNT)
    low, high, step = _number(environ, SLURM_MIN), _number(environ, SLURM_MAX), _number(environ, SLURM_STEP)
    if task is None:
        raise UsageError(f"--shard auto: {', '.join(seen)} set but {SLURM_ID} is not (not inside an array task?)")
    if step == 0:
        raise UsageError(f"--shard auto: {SLURM_STEP}=0: an array's ids step by 1 or more")
    step = step or 1
    start = 0 if low is None else low
    if high is not None:
        spanned = (high - start) // step + 1
        if count is not None and spanned != count:
            raise UsageError(f"--shard auto: {SLURM_COUNT}={count} but the ids {start}..{high} in steps of {step} "
                             f"are {spanned}: an array that is not MIN..MAX:STEP (--array=1,4,9) cannot be "
                             f"mapped onto shards; give --shard i/n")
        count = spanned
    if count is None:
        raise UsageError(f"--shard auto: {SLURM_ID}={task} without a count: set {SLURM_COUNT}, or {SLURM_MIN} "
                         f"and {SLURM_MAX}")
    if (task - start) % step:
        raise UsageError(f"--shard auto: {SLURM_ID}={task} is not {start} plus a multiple of "
                         f"{SLURM_STEP}={step}")
    how = f"ids from {start} in steps of {step}" + ("" if low is not None else f" ({SLURM_MIN} unset: from 0)")
    return _shard("slurm", (task - start) // step + 1, count, seen, how)


def _kubernetes(environ: Mapping[str, str]) -> Shard | None:
    seen = _present(environ, (K8S_INDEX, SHARD_COUNT_VARIABLE))
    if not seen:
        return None
    index, count = _number(environ, K8S_INDEX), _number(environ, SHARD_COUNT_VARIABLE)
    if index is None:
        raise UsageError(f"--shard auto: {SHARD_COUNT_VARIABLE} is set but {K8S_INDEX} is not (an Indexed Job "
                         f"sets it: completionMode: Indexed)")
    if count is None:
        raise UsageError(f"--shard auto: {K8S_INDEX}={index} without a count: Kubernetes does not give a pod its "
                         f"Job's completions; set {SHARD_COUNT_VARIABLE} to it in the manifest's env")
    return _shard("kubernetes", index + 1, count, seen, f"{K8S_INDEX} counts from 0")


def _gitlab(environ: Mapping[str, str]) -> Shard | None:
    seen = _present(environ, (GITLAB_INDEX, GITLAB_TOTAL))
    index, total = _number(environ, GITLAB_INDEX), _number(environ, GITLAB_TOTAL)
    if index is None and total in (None, 1):      # GitLab sets CI_NODE_TOTAL=1 on a job without parallel:
        return None
    if index is None:
        raise UsageError(f"--shard auto: {GITLAB_TOTAL}={total} but {GITLAB_INDEX} is not set")
    if total is None:
        raise UsageError(f"--shard auto: {GITLAB_INDEX}={index} without {GITLAB_TOTAL}")
    return _shard("gitlab", index, total, seen, f"{GITLAB_INDEX} counts from 1")


def check_dealt(seen: dict, key: object, name: str, shard: str, count: int, shown: str | None = None) -> None:
    """Record that shard ``shard`` judged the case ``name`` (``key`` in ``seen``; ``shown``: how a message
    names it); a UsageError when another shard judged it too, or when its name deals it to another shard
    (the shards of a merge were dealt differently)."""
    index, _ = parse_shard(shard)
    shown = shown or name
    if key in seen:
        raise UsageError(f"case {shown} is in both shard {seen[key]} and shard {shard}")
    if case_shard(name, count) != index:
        raise UsageError(f"case {shown} is in shard {shard} but belongs to shard {case_shard(name, count)}/{count}: "
                         "the shards were dealt differently")
    seen[key] = shard
