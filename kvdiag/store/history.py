"""Verdict history across builds, commits and machines: `$KVDIAG_HOME/history.sqlite`.

Two tables: `sweeps` (one row per saved sweep) and `runs` (one row per entry
outcome, with the build and machine it was reached on, and the sweep it came
from, if any). A run's id (its run-store folder name) is unique, so recording
the same run twice — from a sweep, then again by `sync_run_store` — keeps one
row. `kvdiag history` first syncs the run store, so runs made by `kvdiag run`
appear without any extra step.

Plain stdlib sqlite3; every call opens its own connection (safe from threads
and from two kvdiag processes at once; sqlite serialises the writers).
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from kvdiag.errors import HarnessError, HistoryUnreadable
from kvdiag.fileio import parse_json
from kvdiag.home import kvdiag_home
from kvdiag.records.verdict import Outcome
from kvdiag.store.runs import RunStore, patched_arm
from kvdiag.store.sweeps import Sweep, target_summary, utc_now

HISTORY_FILE = "history.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    wall_s REAL,
    shard TEXT,
    kvdiag_version TEXT,
    build_commit TEXT,
    dirty INTEGER,
    build_dir TEXT,
    gpu_name TEXT,
    cc TEXT,
    driver TEXT,
    sanitizer_version TEXT,
    machine_key TEXT,
    entries INTEGER NOT NULL,
    counts TEXT NOT NULL,
    path TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    entry_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    k INTEGER,
    n INTEGER,
    reason TEXT,
    error_count INTEGER,
    build_commit TEXT,
    dirty INTEGER,
    build_dir TEXT,
    gpu_name TEXT,
    cc TEXT,
    driver TEXT,
    sanitizer_version TEXT,
    machine_key TEXT,
    kvdiag_version TEXT,
    date TEXT NOT NULL,
    run_id TEXT UNIQUE,
    run_dir TEXT,
    sweep_id INTEGER REFERENCES sweeps(id)
);
CREATE INDEX IF NOT EXISTS runs_by_entry ON runs(entry_id, date);
"""


@dataclass(frozen=True)
class HistoryRow:
    entry_id: str
    verdict: str
    k: int | None
    n: int | None
    reason: str | None
    error_count: int | None
    build_commit: str | None
    dirty: bool | None
    build_dir: str | None
    gpu_name: str | None
    cc: str | None
    driver: str | None
    sanitizer_version: str | None
    machine_key: str | None
    kvdiag_version: str | None
    date: str
    run_id: str | None
    run_dir: str | None
    sweep_id: int | None

    @property
    def k_of_n(self) -> str:
        return f"{self.k}/{self.n}" if self.n else "-"

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def history_path(home: Path | None = None) -> Path:
    return (home or kvdiag_home()) / HISTORY_FILE


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30)
    conn.row_factory = sqlite3.Row
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version < SCHEMA_VERSION:
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    return conn


#: what sqlite says of a file that is not a healthy database: only then is moving it aside the advice
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


@contextmanager
def _database(home: Path | None) -> Iterator[sqlite3.Connection]:
    """The history database, open; whatever sqlite finds wrong with it, at the header or on a page
    in the middle that only a later query reads, is one line, never a traceback:

    * damaged (corrupt, not a database): `HistoryUnreadable` (65 for `history`, a warning for a
      sweep), whose advice, to move it aside, keeps the file;
    * a full disk, a failed write, a file that cannot be opened or written: a `HarnessError` (70),
      whose advice is to free space or fix the disk, never to move a healthy history aside (issue 43:
      a full disk was 65 and "move it aside and kvdiag starts a new one" lost the history);
    * locked by another process past the timeout: said as it is (70)."""
    path = history_path(home)
    conn = None
    try:
        conn = _opened(path)
        yield conn
    except sqlite3.DatabaseError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            raise HarnessError(f"the history database {path} is locked by another process ({exc})") from None
        if name.startswith(_DAMAGED):
            raise HistoryUnreadable(f"the history database {path} is damaged ({exc}): move it aside (it is kept "
                                    f"as it is) and kvdiag starts a new one") from None
        raise HarnessError(f"the history database {path} could not be written ({exc}): free space on its disk "
                           f"or fix what refused the write; the history is left as it was") from None
    finally:
        if conn is not None:
            conn.close()


def _opened(path: Path) -> sqlite3.Connection:
    try:
        return _connect(path)
    except OSError as exc:      # its folder could not be made (a full disk, a read-only home)
        raise HarnessError(f"the history database {path} could not be opened ({exc.strerror or exc}): free "
                           f"space on its disk or fix what refused it; the history is left as it was") from None


def _fingerprint(target: Mapping[str, Any] | None) -> dict[str, Any]:
    t = target_summary(target)
    return {"build_commit": t.commit, "dirty": None if t.dirty is None else int(bool(t.dirty)),
            "build_dir": t.build_dir, "gpu_name": t.gpu_name, "cc": t.cc, "driver": t.driver,
            "sanitizer_version": t.sanitizer_version, "machine_key": t.machine_key}


def _first_error_count(outcome: Outcome) -> int | None:
    return next((int(a.evidence.error_count) for a in outcome.attempts if a.evidence.error_count is not None), None)


def _insert_run(conn: sqlite3.Connection, outcome: Outcome, target: Mapping[str, Any] | None, *,
                run_dir: str | None, date: str, sweep_id: int | None, kvdiag_version: str | None) -> int | None:
    row = {
        "entry_id": outcome.entry_id, "verdict": outcome.verdict.value, "k": outcome.k, "n": outcome.n,
        "reason": outcome.reason, "error_count": _first_error_count(outcome), **_fingerprint(target),
        "kvdiag_version": kvdiag_version, "date": date,
        "run_id": Path(run_dir).name if run_dir else None, "run_dir": run_dir, "sweep_id": sweep_id,
    }
    cur = conn.execute(f"INSERT OR IGNORE INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                       tuple(row.values()))
    return cur.lastrowid if cur.rowcount else None


def record_outcome(outcome: Outcome, target: Mapping[str, Any] | None, *, run_dir: str | Path | None,
                   date: str | None = None, kvdiag_version: str | None = None,
                   home: Path | None = None) -> int | None:
    """Record one entry's outcome; None if that run was already recorded."""
    if kvdiag_version is None:
        from kvdiag import __version__ as kvdiag_version
    with _database(home) as conn, conn:
        return _insert_run(conn, outcome, target, run_dir=str(run_dir) if run_dir else None,
                           date=date or utc_now(), sweep_id=None, kvdiag_version=kvdiag_version)


def record_sweep(sweep: Sweep, *, path: str | Path | None = None, home: Path | None = None) -> int:
    """Record a sweep and each of its outcomes; returns the sweep's row id."""
    fields = {"started_at": sweep.started_at, "wall_s": sweep.wall_s, "shard": sweep.shard,
              "kvdiag_version": sweep.kvdiag_version, **_fingerprint(sweep.target),
              "entries": len(sweep.outcomes), "counts": json.dumps(sweep.counts()),
              "path": str(path) if path else None}
    with _database(home) as conn, conn:
        cur = conn.execute(f"INSERT INTO sweeps ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})",
                           tuple(fields.values()))
        sweep_id = int(cur.lastrowid)
        for outcome in sweep.outcomes:
            _insert_run(conn, outcome, sweep.target, run_dir=outcome.run_dir, date=sweep.started_at,
                        sweep_id=sweep_id, kvdiag_version=sweep.kvdiag_version)
    return sweep_id


_RUN_STAMP = re.compile(r"^(\d{8})-(\d{6})[-.]")


def _date_of_run(run_id: str, path: Path) -> str:
    match = _RUN_STAMP.match(run_id)
    if match:
        stamp = datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
    else:
        stamp = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).replace(microsecond=0)
    return stamp.isoformat()


def sync_run_store(home: Path | None = None, unreadable: list[tuple[str, str]] | None = None,
                   only: set[str] | None = None) -> int:
    """Record every finished entry run of the run store not yet in the history; returns how many.

    A `kvdiag verify` AFTER arm is left out: it ran a scratch build with probes applied, not a
    build of the user's, and its verdict lives in the verification (`kvdiag report`).

    A run whose run.json cannot be read is left out of the history, never the end of it:
    with ``unreadable`` it is named there, (run id, why), for the caller to say so. ``only``: the
    run ids to record (`kvdiag run` records its own runs as it ends), None for every one."""
    home = home or kvdiag_home()
    added = 0
    with _database(home) as conn, conn:
        known = {r[0] for r in conn.execute("SELECT run_id FROM runs WHERE run_id IS NOT NULL")}
        for run in RunStore(home):
            if run.run_id in known or (only is not None and run.run_id not in only):
                continue
            try:
                record = run.record()
            except (OSError, KeyError, TypeError, ValueError) as exc:
                if unreadable is not None:
                    unreadable.append((run.run_id, f"{type(exc).__name__}: {exc}"))
                continue
            if not record.finished or record.outcome is None or patched_arm(record.fields):
                continue
            if _insert_run(conn, record.outcome, record.fields.get("target"), run_dir=str(run.path),
                           date=_date_of_run(run.run_id, run.path / "run.json"), sweep_id=None,
                           kvdiag_version=record.fields.get("kvdiag_version")):
                added += 1
    return added


def history(entry_id: str, *, home: Path | None = None) -> list[HistoryRow]:
    """Every recorded outcome of one entry, oldest first."""
    with _database(home) as conn:
        rows = conn.execute(
            "SELECT entry_id, verdict, k, n, reason, error_count, build_commit, dirty, build_dir, gpu_name, cc, "
            "driver, sanitizer_version, machine_key, kvdiag_version, date, run_id, run_dir, sweep_id "
            "FROM runs WHERE upper(entry_id) = upper(?) ORDER BY date, id", (entry_id,)).fetchall()
    return [HistoryRow(**{**dict(r), "dirty": None if r["dirty"] is None else bool(r["dirty"])}) for r in rows]


def sweeps(*, home: Path | None = None) -> list[dict[str, Any]]:
    """Every recorded sweep, oldest first (counts decoded)."""
    with _database(home) as conn:
        rows = conn.execute("SELECT * FROM sweeps ORDER BY started_at, id").fetchall()
    return [{**dict(r), "counts": _counts(r["counts"])} for r in rows]


def _counts(text: Any) -> dict[str, Any] | None:
    """A sweep row's counts; None when the row holds something else (a hand-edited database)."""
    try:
        counts = parse_json(text)
    except (TypeError, ValueError):
        return None
    return counts if isinstance(counts, dict) else None
