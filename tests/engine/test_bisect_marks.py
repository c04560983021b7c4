"""git's marks read back against the steps kvdiag recorded: every real bisection's log agrees with its steps, and a
mark no step gave is named (engine/bisect/marks.py)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from kvdiag.engine.bisect.marks import unrecorded_marks, unrecorded_message
from kvdiag.records.bisect import BisectRecord, Direction, StepRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _recorded(folder: Path) -> tuple[str, BisectRecord]:
    record = BisectRecord.from_dict(json.loads((folder / "bisect-run.json").read_text())["bisect"])
    return (folder / "bisect-log.txt").read_text(), record


def test_the_fix_bisection_on_the_forks_history_has_every_mark_recorded():
    """Custom terms: git marks `fixed` and `broken`, five of them, each a step's verdict."""
    log, record = _recorded(FIXTURES / "bisect" / "d7-fix-fork")
    assert record.direction is Direction.FIX and log.count("\ngit bisect fixed ") + log.count("\ngit bisect broken ") == 5
    assert unrecorded_marks(log, record.steps, record.direction) == []


def test_the_d1_bisection_on_the_h200_has_only_skips_and_none_needs_a_step():
    with tarfile.open(FIXTURES / "device" / "h200-session14" / "store.tar.gz") as archive:
        log = archive.extractfile("runs/20261204-035421.632401-0001-D1-bisect/bisect-log.txt").read().decode()
    assert unrecorded_marks(log, (), Direction.CAUSE) == []


def test_a_mark_no_step_gave_is_named_with_its_term():
    log, record = _recorded(FIXTURES / "bisect" / "d7-fix-fork")
    steps = [s for s in record.steps if not s.commit.startswith("9f5850a04")]
    assert unrecorded_marks(log, steps, record.direction) == [("9f5850a0403481241401c2065e67b11de0d3dcfa", "broken")]
    wrong = [StepRecord(s.commit, s.verdict, s.reason, 125 if s.commit.startswith("c3ebc89de") else s.exit)
             for s in record.steps]
    marks = unrecorded_marks(log, wrong, record.direction)
    assert marks == [("c3ebc89de7d9c8a35b742db9eb598715d2948243", "fixed")]
    assert unrecorded_message(marks).startswith("git bisect took c3ebc89de7d9 as fixed, but no step recorded that")
