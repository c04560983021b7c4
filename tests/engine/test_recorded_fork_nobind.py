"""Issue #20 on the H200 without the Python GPU bindings, as kvdiag recorded it (session 4).

The recordings are in tests/fixtures/device/h200-fork-llama-session4 (see its
README.md): `kvdiag doctor --refresh` with pycuda and cupy made unimportable
(the README's plain `pip install -e .`), then `kvdiag scan D2` in the same
environment on the BeeLlama fork 775450a68 and on upstream llama.cpp 749f688fc.
The controls pass through nvcc-built canary programs, so the clean cases are
unaffected, not inconclusive.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from engine_helpers import read_recorded

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-fork-llama-session4"
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")

#: what each recorded scan found: cases, affected, unaffected, inconclusive, the site, its wall time
SCANS = {
    "fork": (133, 58, 75, 0, "fattn-mma-f16.cuh:1607", 9.3),
    "upstream": (132, 60, 72, 0, "fattn-mma-f16.cuh:1538", 8.9),
}


def _text(name: str) -> str:
    return read_recorded(DEVICE / name)


def test_doctor_without_bindings_passes_all_four_controls_through_nvcc_built_canaries():
    log = _text("doctor-nobind.log")
    assert "PYTHONPATH=/tmp/kv/hide" in log.splitlines()[0]           # pycuda and cupy hidden
    for binding in ("pycuda", "cupy"):
        assert re.search(rf"^WARN  {binding} +not importable .*canaries run as nvcc-built programs", log, re.M)
    passed = re.findall(r"^PASS  control (\w+) .*, launcher nvcc-exe\)$", log, re.M)
    assert passed == list(TOOLS)
    assert not re.search(r"^(FAIL|SKIP)", log, re.M)
    assert "trusted: memcheck, racecheck, synccheck, initcheck" in log
    assert log.rstrip().endswith("exit 0 in 29 s")
    doctor = json.loads(_text("doctor-nobind.run.json.gz"))["doctor"]
    assert doctor["ok"] and doctor["exit_code"] == 0 and doctor["trusted_tools"] == list(TOOLS)
    assert [(c["tool"], c["launcher"], c["passed"]) for c in doctor["controls"]] == [(t, "nvcc-exe", True) for t in TOOLS]


@pytest.mark.parametrize("tree", sorted(SCANS))
def test_scan_d2_without_bindings_counts_as_recorded_and_holds_nothing_back(tree):
    cases, affected, unaffected, inconclusive, site, wall = SCANS[tree]
    log = _text(f"scan-D2-{tree}-nobind.log.gz")
    assert "PYTHONPATH=/tmp/kv/hide" in log.splitlines()[0]
    assert f"{cases} supported case(s), 0 not supported; {cases} run with 8 worker(s) in {wall} s" in log
    summary = re.search(r"^affected: (\d+) +unaffected: (\d+) +inconclusive: (\d+) +other: (\d+)$", log, re.M)
    assert summary and tuple(map(int, summary.groups())) == (affected, unaffected, inconclusive, 0)
    rows = Counter(line.split()[0] for line in log.splitlines() if line.startswith(("confirmed ", "not-reproduced ",
                                                                                     "inconclusive ")))
    assert rows == Counter({"confirmed": affected, "not-reproduced": unaffected})
    assert re.search(rf"^  {re.escape(site)} \[barrier-divergence\] in {affected} case\(s\)", log, re.M)
    assert log.rstrip().endswith("exit 1 in 11 s")       # 1: a confirmed case

    scan = json.loads(_text(f"scan-D2-{tree}-nobind.run.json.gz"))["scan"]
    assert len(scan["cases"]) == cases and scan["wall_s"] == pytest.approx(wall, abs=0.05)
    assert {k: v for k, v in scan["counts"].items() if v} == {"confirmed": affected, "not-reproduced": unaffected}
    assert [(s["site"], s["cases"]) for s in scan["sites"]] == [(site, affected)]
    clean = [c for c in scan["cases"].values() if c["verdict"] == "not-reproduced"]
    # each clean case is unaffected because synccheck's control passed here, through the nvcc-built canary
    assert all("synccheck control passed on this machine" in c["reason"] and "(launcher nvcc-exe)" in c["reason"]
               for c in clean), clean[0]["reason"]
