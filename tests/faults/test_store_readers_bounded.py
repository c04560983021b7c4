"""Issue 28: the store's readers are bounded in depth as well as size; a listing survives one bad file.

One run.json of ``'[' * 100000`` made `runs`, `history` and `report` exit 70 with a
RecursionError, although `runs --help` promises an unreadable run.json "is listed as
such, never left out". Each scenario plants one hostile file beside good ones and
asserts: a listing still lists (the bad one as unreadable, or named on stderr), a
command about that one file exits 65 with one line, nothing exits 70.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from faults_helpers import REPO, Faults, one_line

GOOD = "20261201-100000.000001-0001-D12"
BAD = "20261201-100000.000002-0002-D12"

HOSTILE = {
    "deep-100000": "[" * 100000,                                  # RecursionError in json.loads
    "deep-200-closed": "[" * 200 + "]" * 200,                     # parses, then breaks a recursive walk
    "deep-objects": '{"a":' * 5000 + "1" + "}" * 5000,
}


def _finished_run(kv: Faults, run_id: str) -> Path:
    from kvdiag.store.runs import RunDir

    path = kv.home / "runs" / run_id
    path.mkdir(parents=True)
    outcome = {"entry": "D12", "verdict": "not-reproduced", "reason": "the good run", "attempts": [],
               "warnings": [], "step": "throw-probe", "duration_s": 0.1, "extra": {}}
    RunDir(path).write("run.json", {"entry": "D12", "status": "finished", "step": "throw-probe", "target": {},
                                    "outcome": outcome})
    return path


def _plant(kv: Faults, run_id: str, text: str) -> Path:
    path = kv.home / "runs" / run_id
    path.mkdir(parents=True)
    (path / "run.json").write_text(text)
    return path


@pytest.mark.parametrize("name", HOSTILE)
def test_runs_lists_a_hostile_run_json_as_unreadable(kv: Faults, name):
    _finished_run(kv, GOOD)
    _plant(kv, BAD, HOSTILE[name])
    for args in (["runs"], ["runs", "--entry", "D12"]):
        code, out, err = kv.cli(*args)
        assert code == 0, err
        rows = out.splitlines()[2:]
        assert [r.split()[0] for r in rows] == [GOOD, BAD], out
        assert rows[0].split()[2] == "not-reproduced" and rows[1].split()[2] == "unreadable"
        assert "nested too deeply" in rows[1]


@pytest.mark.parametrize("name", HOSTILE)
def test_history_keeps_the_good_runs_and_names_the_bad_one(kv: Faults, name):
    _finished_run(kv, GOOD)
    _plant(kv, BAD, HOSTILE[name])
    code, out, err = kv.cli("history", "D12")
    assert code == 0, err
    assert "not-reproduced" in out and GOOD in out
    assert one_line(err).startswith(f"kvdiag: run {BAD} cannot be read and is not in this history (")
    assert "nested too deeply" in err


@pytest.mark.parametrize("name", HOSTILE)
def test_report_of_the_hostile_newest_run_is_65_and_an_older_run_is_still_reported(kv: Faults, name):
    _finished_run(kv, GOOD)
    _plant(kv, BAD, HOSTILE[name])
    code, out, err = kv.cli("report", "D12")
    assert code == 65 and out == ""
    assert one_line(err).startswith(f"kvdiag: {kv.home / 'runs' / BAD / 'run.json'} is not valid JSON: ")
    assert "nested too deeply" in one_line(err)
    code, out, err = kv.cli("report", "D12", "--run", GOOD)
    assert code == 0 and "the good run" in out, err


def test_render_compare_and_merge_of_a_sweep_that_parses_but_nests_too_deep_are_65(kv: Faults):
    """('[' * 100000 was already 65 here: tests/faults/test_faults.py g23.)"""
    bad = kv.root / "bad.json"
    bad.write_text(HOSTILE["deep-200-closed"])
    for args in (["render", bad], ["compare", bad, bad], ["merge", bad, "-o", kv.root / "merged.json"]):
        code, _, err = kv.cli(*args)
        assert code == 65 and "nested too deeply" in one_line(err), (args, err)
    assert not (kv.root / "merged.json").exists()


def test_a_hostile_cache_is_a_miss_and_a_hostile_sweep_row_is_shown_without_counts(kv: Faults):
    import sqlite3

    from kvdiag.controls.cache import load_controls
    from kvdiag.store.history import sweeps

    kv.home.mkdir(parents=True)
    (kv.home / "controls.json").write_text(HOSTILE["deep-100000"])
    assert load_controls(kv.home, "any-key") == {}
    code, _, _ = kv.cli("history", "D12")            # makes the database
    assert code == 0
    with sqlite3.connect(kv.home / "history.sqlite") as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(sweeps)")]
        row = {c: None for c in columns if c != "id"} | {"counts": HOSTILE["deep-100000"]}
        row = {c: (v if v is not None else "x") for c, v in row.items()}
        conn.execute(f"INSERT INTO sweeps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    assert [s["counts"] for s in sweeps(home=kv.home)] == [None]


def test_every_json_file_is_read_through_the_bounded_reader():
    """The audit behind the scenarios: outside kvdiag/fileio.py no module parses JSON itself,
    except the schemas shipped inside the package and a round trip of kvdiag's own value."""
    allowed = {"kvdiag/report/schemas.py": 1, "kvdiag/cli.py": 1}
    found: dict[str, int] = {}
    for path in sorted((REPO / "kvdiag").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "kvdiag/fileio.py":
            continue
        n = len(re.findall(r"\bjson\.loads?\(", path.read_text()))
        if n:
            found[rel] = n
    assert found == allowed, json.dumps(found, indent=1)
