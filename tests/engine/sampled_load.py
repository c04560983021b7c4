"""The host's and the GPU's load as a device script sampled them each second: ``cpu.log.gz`` (the time, then
``/proc/stat``'s first line) and ``gpu.csv.gz`` (the time, then nvidia-smi's memory used in MiB and
utilization in %), in the fixtures of device sessions 24 on; and the script's own time stamps (``chain.txt``),
which say when each arm ran."""

from __future__ import annotations

from pathlib import Path

from test_recorded_h100_session18_discover import read_gz


def _within(rows: list[list[str]], start: int | None, end: int | None) -> list[list[str]]:
    return [r for r in rows if (start is None or int(r[0]) >= start) and (end is None or int(r[0]) <= end)]


def busy_cores(fixture: Path, start: int | None = None, end: int | None = None, cores: int = 16) -> float:
    """The host's busy cores on average between the first and the last sample (idle and iowait not busy)."""
    rows = _within([line.split() for line in read_gz(fixture / "cpu.log.gz").splitlines()], start, end)
    first, last = [int(v) for v in rows[0][2:]], [int(v) for v in rows[-1][2:]]
    idle = (last[3] + last[4]) - (first[3] + first[4])
    return cores * (1 - idle / (sum(last) - sum(first)))


def gpu_samples(fixture: Path, start: int | None = None, end: int | None = None) -> tuple[list[int], list[int]]:
    """(MiB used, % busy) for each sample."""
    rows = _within([line.replace(",", " ").split() for line in read_gz(fixture / "gpu.csv.gz").splitlines()],
                   start, end)
    return [int(r[1]) for r in rows], [int(r[2]) for r in rows]


def chain_stamps(fixture: Path) -> dict[str, int]:
    """The script's time stamps (``chain.txt``: the Unix time, seconds since the start, the budget left, then
    what happened): what happened -> the Unix time."""
    return {" ".join(line.split()[3:]): int(line.split()[0])
            for line in (fixture / "chain.txt").read_text().splitlines()}


def arm_span(fixture: Path, arm: str) -> tuple[int, int]:
    """When a benchmark arm of the script began and ended (it ended well)."""
    at = chain_stamps(fixture)
    return at[f"arm {arm} begins"], at[f"arm {arm} ends rc=0"]
