"""Device session 13 on the H200 (tests/fixtures/device/h200-session13): D1's bisection resumed from session 12's,
which had resumed from session 10's. The old end must come through two abandoned bisections with its evidence
still named, and the new end's build record must show why one device call cannot hold it."""

from __future__ import annotations

import tarfile
from pathlib import Path

from kvdiag.engine.bisect.resume import read_resumed
from kvdiag.engine.bisect.step import read_steps
from recorded_d1_bisection import FIXTURES, OLD_END, SESSION10, SESSION12, SESSION13, resume, stores


def test_on_the_device_the_old_end_came_through_session_12_from_session_10(tmp_path: Path):
    store = stores(tmp_path, "h200-session13")
    taken = read_resumed(store.root / SESSION13 / "resume.json")
    assert taken.run_id == SESSION12 and taken.status == "abandoned" and taken.passed_over == ()
    (old,) = read_steps(store.root / SESSION13 / "bisect-steps.json")
    assert (old.commit, old.verdict, old.reused_from, old.build_s) == (OLD_END, "not-reproduced", SESSION10, 1266.698)


def test_the_next_session_can_resume_from_session_13_with_all_three_stores(tmp_path: Path):
    taken = resume(stores(tmp_path, "h200-session10", "h200-session12", "h200-session13"), SESSION13)
    assert taken.status == "abandoned" and list(taken.steps) == [OLD_END] and taken.passed_over == ()
    assert taken.take(OLD_END, "old end").reused_from == SESSION10


def test_a_resumed_resume_without_the_first_evidence_run_builds_the_old_end_again(tmp_path: Path):
    """Sessions 12 and 13 hold no evidence of their own for a12d7e228: only session 10's run does."""
    taken = resume(stores(tmp_path, "h200-session12", "h200-session13"), SESSION13)
    assert taken.steps == {}
    ((commit, why),) = taken.passed_over
    assert commit == OLD_END and "20261203-085236.064266-0004-D1" in why


def _ninja_rows() -> list[tuple[float, float, str]]:
    lines = (FIXTURES / "h200-session13" / "new-end-partial.ninja_log").read_text().splitlines()
    return [(int(f[0]) / 1000, int(f[1]) / 1000, f[3]) for f in (line.split("\t") for line in lines[1:])]


def test_the_new_ends_build_is_longer_than_one_device_call():
    """145 of 521 objects in 520.5 s; six KVarN MMA instances took 335-361 s each; the other ten were compiling."""
    rows = _ninja_rows()
    assert len(rows) == 145 and max(end for _, end, _ in rows) == 520.537
    kvarn = sorted(end - start for start, end, name in rows if "fattn-mma-kvarn-instance-" in name)
    assert len(kvarn) == 6 and 335 < kvarn[0] and kvarn[-1] < 362
    assert round(sum(end - start for start, end, _ in rows)) == 4391
    ps = (FIXTURES / "h200-session13" / "ps-at-521s.txt").read_text()
    still = {line.split("fattn-mma-kvarn-instance-")[1].split(".")[0] for line in ps.splitlines()
             if "fattn-mma-kvarn-instance-" in line}
    done = {name.split("fattn-mma-kvarn-instance-")[1].split(".")[0] for *_, name in rows
            if "fattn-mma-kvarn-instance-" in name}
    assert len(still) == 10 and not still & done


def test_no_machine_path_is_left_in_the_record():
    with tarfile.open(FIXTURES / "h200-session13" / "store.tar.gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                text = archive.extractfile(member).read().decode("utf-8", "replace")
                assert "/tmp/d/" not in text and "kvdiag-bisect-D1-" not in text, member.name
