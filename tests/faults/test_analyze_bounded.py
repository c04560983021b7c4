"""Issue 28: `kvdiag analyze` of a big sanitizer log runs in bounded memory.

A 200 MB sanitizer log took 53 s and 2.56 GB at its peak (1.5 GB here): the whole
text was read, then every finding kept. The scenario gives a real `kvdiag analyze`
process a 40 MB log made from a recorded synccheck walk (benchmarks/bench_analyze_memory.py
makes the 200 MB one; docs/performance.md has its numbers) and asserts the child's peak
RSS stays under 120 MB (the whole-text reading needed about 300 MB for this one), the exit
code and that the counts cover every repeated block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from faults_helpers import REPO, Faults

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_analyze_memory import RECORDED, make_log  # noqa: E402

CEILING_MB = 120


def test_analyze_of_a_40_mb_log_stays_under_its_memory_ceiling(kv: Faults):
    log = kv.root / "big-synccheck.log"
    size = make_log(RECORDED, 40_000_000, log)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "kvdiag", "analyze", str(log), "--format", "json"],
                                stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)      # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        assert proc.returncode == 0, err.read().decode()
        data = json.loads(out.read())
    peak_mb = usage.ru_maxrss / 1024
    assert peak_mb < CEILING_MB, f"{peak_mb:.0f} MB for a {size / 1e6:.0f} MB log"
    sanitizer = data["sanitizer"]
    assert sanitizer["tool"] == "synccheck" and sanitizer["error_count"] == 256 and sanitizer["has_summary"]
    assert sanitizer["printed"] > 40_000 and sum(s["count"] for s in sanitizer["sites"]) == sanitizer["printed"]
    assert max(s["blocks"] for s in sanitizer["sites"]) == 64
