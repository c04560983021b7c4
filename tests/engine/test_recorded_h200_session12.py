"""Device session 12 on the H200 (tests/fixtures/device/h200-session12): D1's bisection resumed from session
10's store took the judged old end there, then lost its machine while the new end was building. The next
session resumes from this newest bisection, so its record must carry the old end on, with session 10's
evidence, and say which bisection judged it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from kvdiag.engine.bisect.resume import read_resumed
from kvdiag.engine.bisect.step import read_steps
from recorded_d1_bisection import FIXTURES, OLD_END, SESSION10, SESSION12, resume, stores


def test_on_the_device_the_old_end_was_taken_not_built_again(tmp_path: Path):
    store = stores(tmp_path, "h200-session12")
    taken = read_resumed(store.root / SESSION12 / "resume.json")
    assert taken.run_id == SESSION10 and taken.status == "abandoned" and taken.passed_over == ()
    (old,) = read_steps(store.root / SESSION12 / "bisect-steps.json")
    assert (old.commit, old.role, old.verdict, old.reused_from) == (OLD_END, "old end", "not-reproduced", SESSION10)
    build_log = store.root / "20261203-231302.931150-0002-D1-bisect-step" / "logs" / "bisect-build.stdout.log"
    assert build_log.read_text().splitlines()[-1].startswith("[127/521] ")    # the new end, cut short


def test_the_next_session_resumes_from_the_newest_bisection_and_keeps_the_old_end(tmp_path: Path):
    taken = resume(stores(tmp_path, "h200-session10", "h200-session12"), SESSION12)
    assert taken.status == "abandoned" and list(taken.steps) == [OLD_END] and taken.passed_over == ()
    assert taken.take(OLD_END, "old end").build_s == 1266.698


def test_without_session_10s_evidence_run_the_old_end_is_built_again(tmp_path: Path):
    taken = resume(stores(tmp_path, "h200-session12"), SESSION12)
    assert taken.steps == {}
    ((commit, why),) = taken.passed_over
    assert commit == OLD_END and "20261203-085236.064266-0004-D1" in why


def test_the_new_ends_build_stalled_on_the_kvarn_instances(tmp_path: Path):
    """ninja's log: nothing finished after 177.8 s; the processes at 522 s: 16 KVarN MMA instances."""
    rows = [line.split("\t") for line in (FIXTURES / "h200-session12" / "new-end-partial.ninja_log").read_text()
            .splitlines() if not line.startswith("#")]
    assert len(rows) == 128 and max(int(r[1]) for r in rows) == 177795
    assert not any("fattn-mma-kvarn-instance" in r[3] for r in rows)
    ps = (FIXTURES / "h200-session12" / "ps-at-521s.txt").read_text()
    running = {line.split("fattn-mma-kvarn-instance-")[1].split(".")[0] for line in ps.splitlines()
               if "fattn-mma-kvarn-instance-" in line}
    assert len(running) == 16


@pytest.mark.parametrize("session", ["h200-session12"])
def test_no_machine_path_is_left_in_the_record(session: str):
    for name in ("store.tar.gz",):
        with tarfile.open(FIXTURES / session / name) as archive:
            for member in archive.getmembers():
                if member.isfile():
                    text = archive.extractfile(member).read().decode("utf-8", "replace")
                    assert "/tmp/d/" not in text and "kvdiag-bisect-D1-" not in text, member.name


BENCH = FIXTURES / "h200-session12" / "bench"
FAST = "16at0b128_auto+entry+bykernel+nooverlap+slots16.json.gz"
OLD_PATH = "8at0_plain.json.gz"


def _scan(name: str) -> dict:
    import gzip
    import json

    with gzip.open(BENCH / name, "rt") as fh:
        return json.load(fh)


def _affected(scan: dict) -> set[str]:
    return {case for case, result in scan["cases"].items() if result["verdict"] == "confirmed"}


def test_the_whole_op_scan_took_under_a_minute_and_found_what_the_old_path_found():
    """#25: upstream 749f688fc, `scan D2 --params hsk`, one bench run: 16 slots 57.6 s, the old path 93.8 s."""
    fast, old = _scan(FAST), _scan(OLD_PATH)
    assert fast["wall_s"] <= 60 < old["wall_s"]
    assert (fast["wall_s"], old["wall_s"]) == (57.577, 93.789)
    assert len(fast["cases"]) == len(old["cases"]) == 2932
    assert _affected(fast) == _affected(old) and len(_affected(fast)) == 1330
    assert fast["counts"]["inconclusive"] == fast["counts"]["error"] == 0
    route, detect = fast["phases"]["route"], fast["phases"]["detect"]
    assert (route["processes"], detect["processes"]) == (16, 16)
    assert route["cases"] == 2932 and detect["cases"] == 2031


def test_the_scans_default_pool_on_that_machine_is_the_one_measured():
    """The H200's 16 cores and 150 GB give a scan 16 slots: the measured variant's count, no variable needed."""
    import gzip

    from kvdiag.proc.slots import scan_slots

    assert scan_slots(150_109_880_320, {}, cpus=16) == 16
    gpu = gzip.open(BENCH / "bench-gpu.csv.gz", "rt").read().splitlines()
    peak_mib = max(float(line.split(",")[2].split()[0]) for line in gpu[1:] if "MiB" in line)
    assert peak_mib == 10603.0            # the whole bench's peak: 16 processes in 10.4 GiB, not 16 x 8 GiB
