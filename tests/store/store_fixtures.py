"""Small sweeps for the store tests, built from the engine's value types (imported by name:
several test folders have a conftest.py)."""

from __future__ import annotations

import copy

from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.store.sweeps import Sweep, shard_ids, sweep_outcome

TARGET = {
    "build": {"build_dir": "/home/user/ggml/build", "cuda_architectures": "90", "cuda_flags": "-lineinfo",
              "build_type": "Release", "options": {"GGML_CUDA": "ON"}, "lineinfo": True,
              "git": {"commit": "d99724f2a0c6", "short": "d99724f2", "dirty": False, "dirty_files": [],
                      "dirty_count": 0},
              "staleness": {"checked": True, "stale": False, "tool": "ninja -n", "pending_count": 0,
                            "proof": "the ninja -n control (ninja 1.11.1 (/usr/bin/ninja)) called a staged build "
                                     "current right after building it and stale after an edit of its header"}},
    "environment": {"key": "5f0c2e91ab34", "host": {"hostname": "box-a"},
                    "gpu": {"devices": [{"name": "NVIDIA H200", "compute_capability": "9.0"}],
                            "driver_version": "580.159.04", "runtime_version": "13.0"},
                    "tools": {"compute_sanitizer": "2025.3.1", "nvcc": "13.0.88"}},
}

VERDICTS = {"D1": Verdict.NOT_REPRODUCED, "D2": Verdict.CONFIRMED, "D3": Verdict.INCONCLUSIVE,
            "D4": Verdict.NOT_APPLICABLE, "D5": Verdict.SKIPPED, "D10": Verdict.NOT_REPRODUCED,
            "D11": Verdict.CONFIRMED}


def outcome(entry_id: str, verdict: Verdict | None = None) -> Outcome:
    verdict = verdict or VERDICTS.get(entry_id, Verdict.NOT_REPRODUCED)
    ev = Evidence(error_count=2048 if verdict is Verdict.CONFIRMED else 0)
    return Outcome(entry_id, verdict, f"{entry_id} {verdict.value}",
                   (Attempt("fast", 1, verdict, "r", ev),) if verdict is not Verdict.NOT_APPLICABLE else ())


def sweep_of(ids, *, shard: str | None = None, selection=None, target=None, started_at="2026-11-29T10:00:00+00:00",
             wall_s: float = 10.0, interrupted: bool = False) -> Sweep:
    selection = list(selection if selection is not None else ids)
    planned = shard_ids(selection, shard) if ids is None else ids
    return Sweep(target=copy.deepcopy(target or TARGET),
                 outcomes=[sweep_outcome(outcome(i), title=f"title {i}",
                                         run_dir=f"/home/user/.kvdiag/runs/20261129-100000-{i}-ab12")
                           for i in planned],
                 started_at=started_at, wall_s=wall_s, shard=shard, kvdiag_version="0.1.0", selection=selection,
                 interrupted=interrupted)
