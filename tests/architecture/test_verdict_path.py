"""A verdict's path through the engine (issue #42), counted from the code's calls by verdict_path.py.

Measured at 32b72e6, before the engine became subpackages, and after: 40 stays in 17 modules,
23 returns, 18 climbs; the move changed no call, so the module path is the same. Issue #41's
case formats and launch lister then added stays: 46 in 19 modules, 27 returns, 20 climbs (by
subpackage 8 stays in 3 rooms, 5 returns, 3 climbs). The reshaping into one pipeline, each stage
called once in order (execute.run_entry: plan -> per attempt planning, processes, observe, judge ->
outcome), brought it to 27 stays in 20 modules, 7 returns, 4 climbs: the issue's target. By
subpackage it is still 8 stays in 3 rooms (run, verdict, evidence), 5 returns, 3 climbs.
"""

from __future__ import annotations

import verdict_path

# By module: 40 stays and 18 climbs at the restructure; 46 and 20 once issue #41's work joined the path;
# 27 and 4 once the path became one pipeline (the climbs left: into the run after the ranges are looked
# up, into the judge after the observation, into a compile step's own attempt, into the verdict).
MEASURED = {"stays": 27, "climbs": 4}
TARGET = {"stays": 35, "climbs": 4}             # issue #42, by module


def measure() -> dict[str, int]:
    source = verdict_path.Source(verdict_path.PACKAGE)
    path = verdict_path.walk(source)
    print(verdict_path.summary(source, path))
    return {"stays": len(path.stays), "climbs": len(path.climbs(source.engine_heights()))}


def test_the_verdict_path_grows_no_longer():
    measured = measure()
    assert measured["stays"] <= MEASURED["stays"] and measured["climbs"] <= MEASURED["climbs"], measured


def test_by_subpackage_the_path_stays_within_the_issue_target():
    source = verdict_path.Source(verdict_path.PACKAGE)
    rooms = verdict_path.walk(source).by_room()
    assert set(rooms.modules) == {"kvdiag.engine.run", "kvdiag.engine.verdict", "kvdiag.engine.evidence"}
    assert len(rooms.stays) <= TARGET["stays"] and len(rooms.climbs(source.engine_heights(3))) <= TARGET["climbs"]


def test_by_module_the_path_meets_the_issue_target():
    measured = measure()
    assert measured["stays"] <= TARGET["stays"] and measured["climbs"] <= TARGET["climbs"], measured


def test_the_counter_follows_the_entry_and_counts_stays_returns_and_climbs(tmp_path):
    """A staged engine: top hands the entry to low, then to mid (which goes back down to low),
    and calls a helper without it (not followed). Heights: top 3, mid 2, low 1."""
    engine = tmp_path / "kvdiag" / "engine"
    engine.mkdir(parents=True)
    for name in ("__init__.py", "../__init__.py"):
        (engine / name).write_text("")
    (engine / "low.py").write_text("def check(entry):\n    return entry\n\n\ndef noise():\n    return 1\n")
    (engine / "mid.py").write_text("from kvdiag.engine.low import check\n\n\n"
                                   "def judge(item):\n    return check(item)\n")
    (engine / "top.py").write_text("from kvdiag.engine import low\nfrom kvdiag.engine.mid import judge\n\n\n"
                                   "def run(entries):\n    for entry in entries:\n        low.check(entry)\n"
                                   "        low.noise()\n        judge(entry)\n        _finish(entry)\n\n\n"
                                   "def _finish(e):\n    return e\n")
    source = verdict_path.Source(tmp_path / "kvdiag")
    path = verdict_path.walk(source, "kvdiag.engine.top:run")
    assert path.stays == ["kvdiag.engine.top", "kvdiag.engine.low", "kvdiag.engine.mid", "kvdiag.engine.top"]
    assert (path.rooms, path.returns) == (3, 1)
    assert path.climbs(source.engine_heights()) == [("kvdiag.engine.low", "kvdiag.engine.mid"),
                                                    ("kvdiag.engine.mid", "kvdiag.engine.top")]
