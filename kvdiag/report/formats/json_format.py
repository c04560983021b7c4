"""The sweep itself, as saved: the machine-readable format (`kvdiag compare` and `merge` read it back)."""

from __future__ import annotations

import json

from kvdiag.report.formats import SweepFormatter
from kvdiag.store.sweeps import Sweep


class JsonFormat(SweepFormatter):
    suffix = ".json"

    def format(self, sweep: Sweep) -> str:
        return json.dumps(sweep.to_dict(), indent=2, default=str) + "\n"
