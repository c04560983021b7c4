"""The host's and the GPU's load as a device script sampled them each second: ``cpu.log.gz`` (the time, then
``/proc/stat``'s first line) and ``gpu.csv.gz`` (the time, then nvidia-smi's memory used in MiB and
utilization in %), in the fixtures of device sessions 24 on."""

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
