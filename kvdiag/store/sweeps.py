"""The saved sweep: one JSON file per sweep (or per shard of one), read by every sweep formatter.

A `Sweep` holds its header (target, start, wall time, shard, selection) and one
`SweepOutcome` per entry (see `kvdiag.records.sweep` for the keys each is saved
with); ``to_dict``/``from_dict`` are the one pair that writes and reads the file.
kvdiag 0.1.x wrote format /1, without `sources`; it is read as it is. Formatters,
`compare`, `merge` and the history read these typed values, never live engine
objects, so a sweep saved on the GPU machine renders the same anywhere later.

Shards: `kvdiag sweep --shard i/n` runs a deterministic part of a selection
(see `kvdiag.engine.sweep.session.shard_entries`; `--shard auto` takes i/n from a job
engine, `kvdiag.shards`, and `shard_from` records which, with its variables);
each shard records the whole `selection`, so `merge_sweeps` can prove that
shards 1..n of one selection, of one target, together cover every entry exactly
once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvdiag.errors import DataError, UsageError
from kvdiag.fileio import prepare_output, read_json
from kvdiag.records.sweep import SweepOutcome
from kvdiag.records.verdict import Outcome, Verdict
from kvdiag.shards import Part, complete_split, parse_shard
from kvdiag.store.runs import write_json_atomic

#: the version written; /2 adds each outcome's ``sources`` (its files as paths of the swept tree)
SWEEP_FORMAT = "kvdiag-sweep/2"
#: every version this kvdiag reads; /1 is what kvdiag 0.1.x wrote
READABLE_SWEEP_FORMATS = ("kvdiag-sweep/1", SWEEP_FORMAT)

_NATURAL = re.compile(r"(\d+)")


def entry_sort_key(entry_id: str) -> tuple:
    """Natural order of ids: D2 before D10 (the order sweeps, shards and reports use)."""
    parts = _NATURAL.split(entry_id.upper())
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def shard_ids(ids: Sequence[str], shard: str | None) -> list[str]:
    """The ids of shard ``"i/n"``: natural id order, dealt round-robin (positions i-1, i-1+n, …).

    Shards 1..n of one list cover each id exactly once; None means all of them.
    """
    ordered = sorted(ids, key=entry_sort_key)
    if shard is None:
        return ordered
    index, count = parse_shard(shard)
    return ordered[index - 1::count]


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Sweep:
    """Every selected entry's outcome against one target."""

    target: Mapping[str, Any]
    outcomes: Sequence[SweepOutcome]
    started_at: str
    wall_s: float
    shard: str | None
    kvdiag_version: str
    selection: Sequence[str] = ()      # every id of the sweep's selection, before sharding
    interrupted: bool = False          # Ctrl-C: the outcomes are those that finished
    shard_from: Mapping[str, Any] | None = None   # --shard auto: the job engine and the variables it set

    def __post_init__(self) -> None:
        # Outcomes given as saved (mappings) are read through the one reader, so `outcomes` always holds
        # SweepOutcome values whoever built the sweep.
        typed = tuple(o if isinstance(o, SweepOutcome) else SweepOutcome.from_dict(o) for o in self.outcomes)
        object.__setattr__(self, "outcomes", typed)

    @property
    def ids(self) -> list[str]:
        return [o.entry_id for o in self.outcomes]

    @property
    def planned(self) -> list[str]:
        """The ids this sweep (or shard) set out to run."""
        return shard_ids(self.selection, self.shard)

    def outcome(self, entry_id: str) -> SweepOutcome | None:
        return next((o for o in self.outcomes if o.entry_id == entry_id), None)

    def counts(self) -> dict[str, int]:
        """How many entries ended in each verdict, every verdict listed (zeros too), in table order."""
        counts = {v.value: 0 for v in Verdict}
        for o in self.outcomes:
            counts[o.verdict.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SWEEP_FORMAT,
            "kvdiag_version": self.kvdiag_version,
            "started_at": self.started_at,
            "wall_s": round(float(self.wall_s), 3),
            "shard": self.shard,
            "shard_from": dict(self.shard_from) if self.shard_from else None,
            "selection": list(self.selection),
            "interrupted": self.interrupted,
            "target": self.target,
            "outcomes": [o.to_dict() for o in self.outcomes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "sweep") -> "Sweep":
        if not isinstance(data, Mapping):
            raise DataError(f"{source}: not a kvdiag sweep (the JSON is not an object)")
        fmt = data.get("format")
        if fmt not in READABLE_SWEEP_FORMATS:
            raise DataError(f"{source}: not a kvdiag sweep (format {fmt!r}, expected one of "
                            f"{', '.join(READABLE_SWEEP_FORMATS)})")
        outcomes = data.get("outcomes")
        if not isinstance(outcomes, list) or not all(isinstance(o, Mapping) and "entry" in o and "verdict" in o
                                                     for o in outcomes):
            raise DataError(f"{source}: 'outcomes' must be a list of outcomes, each with 'entry' and 'verdict'")
        _check_field_types(data, outcomes, source)
        try:
            typed = [SweepOutcome.from_dict(o) for o in outcomes]
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{source}: an outcome cannot be read ({type(exc).__name__}: {exc})") from None
        return cls(target=data.get("target") or {}, outcomes=typed, started_at=str(data.get("started_at", "")),
                   wall_s=float(data.get("wall_s") or 0.0), shard=data.get("shard"),
                   kvdiag_version=str(data.get("kvdiag_version") or "?"),
                   selection=list(data.get("selection") or [o.entry_id for o in typed]),
                   interrupted=bool(data.get("interrupted", False)),
                   shard_from=data.get("shard_from") if isinstance(data.get("shard_from"), Mapping) else None)


def _check_field_types(data: Mapping[str, Any], outcomes: list, source: str) -> None:
    """The fields every reader of a sweep relies on, checked for their JSON type up front, so that a
    hand-edited or foreign file is refused in one line (exit 65) instead of failing deep in a formatter."""
    expected = {"target": (Mapping, "an object"), "shard": (str, "a string like '2/4'"),
                "selection": (list, "a list of ids"), "wall_s": ((int, float), "a number")}
    for key, (kind, what) in expected.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise DataError(f"{source}: '{key}' must be {what}, not {type(value).__name__}")
    if not all(isinstance(i, str) for i in data.get("selection") or ()):
        raise DataError(f"{source}: 'selection' must be a list of ids (strings)")
    for index, outcome in enumerate(outcomes):
        if not isinstance(outcome["entry"], str) or not outcome["entry"]:
            raise DataError(f"{source}: outcome {index}: 'entry' must be an id (a string), "
                            f"not {outcome['entry']!r}")


def sweep_outcome(outcome: Outcome, *, title: str, run_dir: str | None,
                  files: Iterable[str] = (), device: Mapping[str, Any] | None = None) -> SweepOutcome:
    """One sweep outcome: the entry's `Outcome` plus what the formatters need about the entry,
    and the GPU whose worker produced it (None for CPU-only entries)."""
    return SweepOutcome.of(outcome, title=title, run_dir=run_dir, files=files, device=device)


def with_sources(sweep: Sweep) -> Sweep:
    """The sweep with each outcome's ``sources``: its files resolved against the source tree the
    build records, while that tree is on this machine (SARIF names those paths)."""
    from kvdiag.store.source_paths import record_sources

    source_dir = (sweep.target.get("build") or {}).get("source_dir")
    outcomes = []
    for o in sweep.outcomes:
        sources = None if o.sources else record_sources(o.files, source_dir)
        outcomes.append(replace(o, sources=tuple(sources)) if sources is not None else o)
    return replace(sweep, outcomes=outcomes)


def check_sweep_path(path: Path) -> None:
    """A sweep is saved onto a regular file or a new path (a link: onto its target); a folder,
    FIFO or device is refused, never replaced (kvdiag.fileio's rule for every write), and a place
    that cannot be written is refused before the sweep runs."""
    prepare_output(path)


def save_sweep(sweep: Sweep, path: Path) -> Path:
    """Save ``sweep`` (with its ``sources`` resolved, see `with_sources`) atomically: a temporary
    file, then a rename over the old one; only onto a regular file or a new path. Returns the
    file written (a symlink's target: see kvdiag.fileio)."""
    check_sweep_path(Path(path))
    return write_json_atomic(Path(path), with_sources(sweep).to_dict())


def load_sweep(path: Path) -> Sweep:
    return Sweep.from_dict(read_json(path, "sweep"), source=str(path))


# --------------------------------------------------------------------------- target identity


def target_identity(target: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two shards "the same target": the build's code and flags, and the machine's key.

    The key (`Environment.key()`) hashes GPU names and compute capabilities,
    driver, runtime, nvcc and compute-sanitizer versions. Host name and build
    folder are left out on purpose: shards may run on identical machines, each
    with its own checkout of the same commit.
    """
    build = target.get("build") or {}
    git = build.get("git") or {}
    env = target.get("environment") or {}
    return {
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "dirty_files": sorted(git.get("dirty_files") or []),
        "cuda_architectures": build.get("cuda_architectures"),
        "cuda_flags": build.get("cuda_flags"),
        "build_type": build.get("build_type"),
        "options": build.get("options") or {},
        "machine_key": env.get("key"),
    }


@dataclass(frozen=True)
class TargetSummary:
    """A flat, always-complete view of a target dict (every field present, None when unknown)."""

    commit: str | None
    short: str | None
    describe: str | None
    branch: str | None
    dirty: bool | None
    dirty_count: int | None
    build_dir: str | None
    source_dir: str | None
    build_type: str | None
    generator: str | None
    cuda_architectures: str | None
    cuda_flags: str | None
    cuda_compiler_version: str | None
    lineinfo: bool | None
    lineinfo_source: str | None
    staleness: str
    gpu_name: str | None
    gpu_count: int
    cc: str | None
    arch: str | None
    driver: str | None
    driver_cuda: str | None
    runtime: str | None
    sanitizer_version: str | None
    nvcc: str | None
    machine_key: str | None
    hostname: str | None
    os: str | None

    @property
    def commit_label(self) -> str:
        if not self.commit:
            return "unknown commit"
        label = self.short or self.commit[:10]
        if self.dirty:
            label += f" +{self.dirty_count} uncommitted" if self.dirty_count else " (dirty)"
        return label

    @property
    def gpu_label(self) -> str:
        if not self.gpu_name:
            return "no GPU"
        extra = f" (cc {self.cc})" if self.cc else ""
        many = f" ×{self.gpu_count}" if self.gpu_count > 1 else ""
        return f"{self.gpu_name}{extra}{many}"


def target_summary(target: Mapping[str, Any] | None) -> TargetSummary:
    target = target or {}
    build = target.get("build") or {}
    git = build.get("git") or {}
    env = target.get("environment") or {}
    gpu = env.get("gpu") or {}
    devices = gpu.get("devices") or []
    first = devices[0] if devices else {}
    tools = env.get("tools") or {}
    host = env.get("host") or {}
    return TargetSummary(
        commit=git.get("commit"), short=git.get("short"), describe=git.get("describe"), branch=git.get("branch"),
        dirty=git.get("dirty"), dirty_count=git.get("dirty_count"),
        build_dir=build.get("build_dir"), source_dir=build.get("source_dir"), build_type=build.get("build_type"),
        generator=build.get("generator"), cuda_architectures=build.get("cuda_architectures"),
        cuda_flags=build.get("cuda_flags"), cuda_compiler_version=build.get("cuda_compiler_version"),
        lineinfo=build.get("lineinfo") if build else None, lineinfo_source=build.get("lineinfo_source"),
        staleness=_staleness_text(build.get("staleness")) if build else "no build",
        gpu_name=first.get("name"), gpu_count=len(devices), cc=first.get("compute_capability"),
        arch=first.get("arch"), driver=gpu.get("driver_version"), driver_cuda=gpu.get("driver_cuda_version"),
        runtime=gpu.get("runtime_version"), sanitizer_version=tools.get("compute_sanitizer"), nvcc=tools.get("nvcc"),
        machine_key=env.get("key"), hostname=host.get("hostname"), os=host.get("os"),
    )


def _staleness_text(staleness: Mapping[str, Any] | None) -> str:
    """The build's currency in one cell, from the one record D13's verdict reads: "current" only
    when the record carries the control's proof (records of kvdiag before the proof say so)."""
    if not staleness:
        return "not checked: no record"
    if not staleness.get("checked"):
        return f"not checked: {staleness.get('detail') or 'no reason given'}"
    tool = staleness.get("tool") or "dry run"
    if staleness.get("stale"):
        return f"STALE: {staleness.get('pending_count', '?')} build step(s) pending ({tool})"
    if staleness.get("stale") is None:
        return f"unknown ({tool}: {staleness.get('detail') or 'no detail'})"
    if "proof" not in staleness:
        return f"current with its sources ({tool}; recorded before its control was kept)"
    if not staleness.get("proof"):
        return "not checked: no staleness control proved the dry run on this machine"
    return f"current with its sources ({tool}; its control passed on this machine)"


# --------------------------------------------------------------------------- merging shards


def merge_sweeps(sweeps: Sequence[Sweep]) -> Sweep:
    """Shards 1..n of one selection and one target -> the sweep that running it unsharded gives.

    Refuses (UsageError, naming the problem): a sweep that is not a shard, shards
    of different counts or selections, a missing or repeated shard, an
    interrupted shard, shards of different targets (see `target_identity`),
    an entry in two shards, and a selection entry in none.
    """
    sweeps = list(sweeps)
    if not sweeps:
        raise UsageError("nothing to merge: give the shards' sweep files")
    complete_split([Part(s.shard, s.interrupted, f"sweep #{i} (started {s.started_at})")
                    for i, s in enumerate(sweeps, start=1)], "kvdiag sweep", "the selection")
    first = sweeps[0]
    for s in sweeps[1:]:
        check_same_target(f"shards {first.shard} and {s.shard}", first.target, s.target)
        if sorted(s.selection, key=entry_sort_key) != sorted(first.selection, key=entry_sort_key):
            raise UsageError(f"shards {first.shard} and {s.shard} come from different selections of entries")
    seen: dict[str, str] = {}
    for s in sweeps:
        for entry_id in s.ids:
            if entry_id in seen:
                raise UsageError(f"{entry_id} is in both shard {seen[entry_id]} and shard {s.shard}")
            seen[entry_id] = s.shard or "?"
    absent = sorted(set(first.selection) - set(seen), key=entry_sort_key)
    if absent:
        raise UsageError(f"incomplete: no shard has an outcome for {', '.join(absent)}")
    outcomes = sorted((o for s in sweeps for o in s.outcomes), key=lambda o: entry_sort_key(o.entry_id))
    starts = [(s, _parse_time(s.started_at)) for s in sweeps]
    if all(t is not None for _, t in starts):
        begin = min(t for _, t in starts)
        end = max(t.timestamp() + s.wall_s for s, t in starts)
        started_at, wall_s = begin.isoformat(), end - begin.timestamp()
    else:
        started_at, wall_s = min(s.started_at for s in sweeps), max(s.wall_s for s in sweeps)
    return replace(first, outcomes=outcomes, started_at=started_at, wall_s=wall_s, shard=None, shard_from=None,
                   selection=sorted(first.selection, key=entry_sort_key), interrupted=False)


def check_same_target(pair: str, first: Mapping[str, Any], other: Mapping[str, Any]) -> None:
    """A UsageError naming what differs when two parts' targets are not one (`target_identity`)."""
    base, theirs = target_identity(first or {}), target_identity(other or {})
    if base != theirs:
        diff = ", ".join(f"{k}: {base[k]!r} vs {theirs[k]!r}" for k in base if base[k] != theirs[k])
        raise UsageError(f"{pair} ran against different targets ({diff})")


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None

