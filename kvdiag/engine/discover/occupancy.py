"""How many sanitized processes ran at once over a discovery, from each process's start and end.

On one GPU racecheck stops gaining throughput at about four processes (device session 26,
docs/performance.md): the GPU they share binds, not the host. So the pool's order matters only
where fewer processes than the pool run, which is mostly the end of a discovery. This says how long
that was, so that a whole-suite run shows whether its tail, not its total, set the wall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

STARTED, ENDED = "started_unix", "ended_unix"


@dataclass(frozen=True)
class Occupancy:
    most: int              # the most processes running at once
    pool: int              # the processes the pool allowed at once
    span_s: float          # from the first start to the last end
    below_pool_s: float    # time within the span with fewer than ``pool`` running
    tail_s: float          # from the last moment ``pool`` ran at once to the last end (the span if never)

    def to_dict(self) -> dict[str, Any]:
        return {"most": self.most, "pool": self.pool, "span_s": round(self.span_s, 1),
                "below_pool_s": round(self.below_pool_s, 1), "tail_s": round(self.tail_s, 1)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Occupancy | None":
        try:
            return cls(int(data["most"]), int(data["pool"]), float(data["span_s"]), float(data["below_pool_s"]),
                       float(data["tail_s"]))
        except (TypeError, KeyError, ValueError):
            return None

    def describe(self) -> str:
        return (f"processes at once: at most {self.most} of the pool's {self.pool}; fewer than {self.pool} for "
                f"{self.below_pool_s:.1f} s of {self.span_s:.1f} s, the last {self.tail_s:.1f} s of them at the end")


def occupancy(rows: Iterable[Mapping[str, Any]], pool: int) -> Occupancy | None:
    """The rows' processes (each with ``started_unix`` and ``ended_unix``) against a pool of ``pool``;
    None when a row lacks its times (a record from before they were kept) or there is no row."""
    spans = []
    for row in rows:
        start, end = row.get(STARTED), row.get(ENDED)
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or end < start:
            return None
        spans.append((float(start), float(end)))
    if not spans or pool < 1:
        return None
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda ev: (ev[0], ev[1]))
    running = most = 0
    below = 0.0
    last_full = None
    first, last = events[0][0], events[-1][0]
    for (at, step), (after, _) in zip(events, events[1:] + [(last, 0)]):
        running += step
        most = max(most, running)
        if running >= pool:
            last_full = after
        elif after > at:
            below += after - at
    tail = last - (last_full if last_full is not None else first)
    return Occupancy(most, pool, last - first, below, tail)
