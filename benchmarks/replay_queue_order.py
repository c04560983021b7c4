"""Replay a recorded discovery's processes on a slot pool, in its recorded order and in discover's cost order.

Not a measurement: an estimate of what the queue's order alone changes, with every process taking the
wall it took in the recorded run (on a device, contention changes walls, so only a device run says what an
order gives). It answers "how much of the wall was the order's": where a heavy process started late, the
recorded order's replay ends after the cost order's, and both against perfect packing (the processes'
summed walls over the slots).

    python3 benchmarks/replay_queue_order.py tests/fixtures/device/h100-session27/whole-discover.json.gz

The model, kept as simple as the record allows:
- the processes that ended by themselves (an interrupted one tells no wall) run on ``--slots`` slots
  (default: the record's pool);
- where racecheck was routed, its processes of an op become ready when every listing process of that op
  has ended (discover releases them sooner, batch by batch, so this is the later bound), and go to the
  front of the queue, heaviest first, as discover puts released units;
- the other processes wait in the order replayed: as they started in the record, or as
  ``kvdiag.engine.discover.costs.order_units`` puts them with the shipped table (``--costs`` for another).
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from kvdiag.engine.discover.costs import SHIPPED_COSTS, load_costs, order_units


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def replay(queue: list[dict], released: dict[str, list[float]], slots: int) -> float:
    """The wall until the last process ends: ``queue`` in order, and each op's ``released`` walls put first
    once the queue's last process of that op has ended."""
    waiting = {}
    for row in queue:
        waiting[row["op"]] = waiting.get(row["op"], 0) + 1
    pending, front, running, now = list(queue), [], [], 0.0
    while pending or front or running:
        while len(running) < slots and (front or pending):
            if front:
                wall, op = front.pop(0)
                heapq.heappush(running, (now + wall, op, False))
            else:
                row = pending.pop(0)
                heapq.heappush(running, (now + row["wall_s"], row["op"], True))
        now, op, listing = heapq.heappop(running)
        if listing:
            waiting[op] -= 1
            if waiting[op] == 0:
                front = sorted(((w, op) for w in released.get(op, ())), reverse=True) + front
    return now


def process_cases(doc: dict) -> dict[str, tuple[str, ...]]:
    """Each process's cases (their parameter strings), read from the cases' log paths. A case routing
    spared names the listing process's log too, under another tool: only a process's own tool counts."""
    out: dict[str, list[str]] = {}
    for case in doc.get("cases") or ():
        log = Path(str(case.get("log") or "")).name
        if log.endswith(".stdout.log") and log.startswith(f"{case.get('tool')}-"):
            out.setdefault(log[: -len(".stdout.log")], []).append(case["params"])
    return {name: tuple(cases) for name, cases in out.items()}


def replay_orders(doc: dict, slots: int | None = None, costs_path: Path = SHIPPED_COSTS) -> dict:
    ended = [row for row in doc.get("processes") or () if not row.get("why")]
    routing = doc.get("routing") or {}
    routed, source = set(routing.get("routed") or ()), routing.get("source")
    listing = [row for row in ended if row["tool"] not in routed]
    released: dict[str, list[float]] = {}
    for row in ended:
        if row["tool"] in routed:
            released.setdefault(row["op"], []).append(row["wall_s"])
    slots = slots or int(doc.get("workers") or 1)
    recorded = sorted(listing, key=lambda row: row.get("started_unix") or 0.0)
    params = process_cases(doc)
    units = [SimpleNamespace(tool=row["tool"], op=row["op"], row=row,
                             cases=params.get(row["process"]) or ("",) * int(row["cases"])) for row in listing]
    gated = {source: tuple(routed)} if source and routed else None
    by_cost = [unit.row for unit in order_units(units, load_costs(costs_path), gated_by=gated)]
    total = sum(row["wall_s"] for row in ended)
    return {"processes": len(ended), "slots": slots, "recorded_order_s": round(replay(recorded, released, slots), 1),
            "cost_order_s": round(replay(by_cost, released, slots), 1), "perfect_packing_s": round(total / slots, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("discovery", type=Path, help="a saved discovery (.json or .json.gz)")
    ap.add_argument("--slots", type=int, help="processes at a time (default: the record's pool)")
    ap.add_argument("--costs", type=Path, default=SHIPPED_COSTS, help="the cost table (default: kvdiag's)")
    args = ap.parse_args(argv)
    try:
        doc = load(args.discovery)
    except (OSError, ValueError) as exc:
        print(f"replay_queue_order: {args.discovery}: {exc}", file=sys.stderr)
        return 2
    if not doc.get("processes") or "started_unix" not in doc["processes"][0]:
        print(f"replay_queue_order: {args.discovery}: its processes carry no start times (recorded before "
              f"session 26)", file=sys.stderr)
        return 2
    print(json.dumps(replay_orders(doc, args.slots, args.costs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
