"""The run store: `<home>/runs/<run-id>/` with run.json and the logs of every command.

run.json is written at the start (status "running", with the pid, boot id and
start time of the kvdiag process) and replaced atomically at the end with a final
status: "finished", "interrupted" (a signal) or "failed" (with the reason). A run
the process could not finish itself (SIGKILL, power loss) is shown by `kvdiag runs`
as "abandoned": its recorded process is gone. :func:`finish_open_runs` is the
last resort the CLI calls on its way out, so no run.json stays "running" after
kvdiag exits.

Run ids sort in creation order: a UTC timestamp to the microsecond, kept strictly
increasing within a process, then a per-process sequence number, then the label
(`20261202-021045.123456-0003-D2`). Nothing random decides which run is "latest".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from kvdiag.errors import RunUnreadable, UsageError
from kvdiag.fileio import load_json_file, write_json
from kvdiag.records.run import RUN_SCHEMA_VERSION, RunRecord

RUN_FILE = "run.json"
MAX_RUN_FILE_BYTES = 64 << 20     # a scan of thousands of cases writes a few MB
FINAL_STATES = ("finished", "interrupted", "failed")
_ID = re.compile(r"^(?P<date>\d{8})-(?P<time>\d{6})(?:\.(?P<micro>\d{6})-(?P<seq>\d+))?-(?P<label>.+?)"
                 r"(?P<legacy>-[0-9a-f]{4})?$")
_id_lock = threading.Lock()
_last_us = 0
_sequence = 0
_open_runs: dict[Path, "RunDir"] = {}


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    return write_json(path, data)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def this_process() -> dict[str, Any]:
    """What `kvdiag runs` needs to tell later whether the process that wrote a run is still alive."""
    return {"pid": os.getpid(), "boot_id": _boot_id(), "start_ticks": _start_ticks(os.getpid())}


def process_gone(record: Any) -> bool:
    """True when the recorded process is certainly not running any more (other boot, other start)."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return False
    boot = _boot_id()
    if record.get("boot_id") and boot and record["boot_id"] != boot:
        return True
    ticks = _start_ticks(record["pid"])
    if ticks is None:
        return True
    return record.get("start_ticks") is not None and ticks != record["start_ticks"]


def id_label(run_id: str) -> str:
    """The label part of a run id (the entry id, `sweep`, `scan-D2` …)."""
    m = _ID.match(run_id)
    if not m:
        return run_id
    return run_id.split("-", 3)[3] if m.group("micro") else m.group("label")


def id_time(run_id: str) -> str | None:
    """When a run started, read from its id (the store names runs by their UTC start): ISO 8601,
    ``2026-11-29T10:00:00+00:00``; None for a name that is not a run id."""
    m = _ID.match(run_id or "")
    if not m:
        return None
    d, t = m.group("date"), m.group("time")
    return f"{d[:4]}-{d[4:6]}-{d[6:]}T{t[:2]}:{t[2:4]}:{t[4:]}+00:00"


def _order_key(run_id: str) -> tuple:
    m = _ID.match(run_id)
    if not m:
        return ("", 0, 0, run_id)
    return (m.group("date") + m.group("time"), int(m.group("micro") or 0), int(m.group("seq") or 0), run_id)


def new_run_id(label: str) -> str:
    global _last_us, _sequence
    with _id_lock:
        now_us = max(time.time_ns() // 1000, _last_us + 1)
        _last_us = now_us
        _sequence += 1
        seq = _sequence
    seconds, micro = divmod(now_us, 1_000_000)
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(seconds))}.{micro:06d}-{seq:04d}-{label}"


@dataclass(frozen=True)
class RunDir:
    """One run's directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        return id_label(self.run_id)

    @property
    def logs(self) -> Path:
        p = self.path / "logs"
        p.mkdir(parents=True, exist_ok=True)
        return p

    @property
    def scratch(self) -> Path:
        p = self.path / "scratch"
        p.mkdir(parents=True, exist_ok=True)
        return p

    def write(self, name: str, data: Any) -> Path:
        """Write ``name`` atomically; run.json (a `RunRecord`, or its mapping) goes through `write_record`."""
        if name == RUN_FILE:
            return self.write_record(data if isinstance(data, RunRecord) else RunRecord.from_dict(data))
        write_json_atomic(self.path / name, data)
        return self.path / name

    def write_record(self, record: RunRecord) -> Path:
        """The one place run.json is written: from its typed record, stamped with this version's
        ``schema_version``; a running run names its process (for `abandoned`) and stays open until
        its final state is on disk."""
        target = self.path / RUN_FILE
        final = record.status != "running"
        if not final:
            record = replace(record, fields={**record.fields, "process": this_process()})
            _open_runs[self.path] = self
        write_json_atomic(target, replace(record, schema_version=RUN_SCHEMA_VERSION).to_dict())
        if final:                    # only once the final state is on disk is the run closed
            _open_runs.pop(self.path, None)
        return target

    def record(self) -> RunRecord:
        """run.json as a typed record (a 0.1.x file, without schema_version, reads as version 1)."""
        return RunRecord.from_dict(self.read())

    def read(self, name: str = RUN_FILE) -> dict[str, Any]:
        """A JSON file of this run, bounded in size and depth (OSError, ValueError)."""
        return load_json_file(self.path / name, MAX_RUN_FILE_BYTES)

    def read_checked(self) -> dict[str, Any]:
        """run.json as a mapping, or RunUnreadable saying what is wrong with it."""
        path = self.path / RUN_FILE
        try:
            data = self.read()
        except OSError as exc:
            raise RunUnreadable(f"cannot read {path}: {exc.strerror}", f"cannot read run.json: {exc.strerror}") from None
        except ValueError as exc:
            raise RunUnreadable(f"{path} is not valid JSON: {exc}", f"run.json is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RunUnreadable(f"{path} is not a JSON object", "run.json is not a JSON object")
        for key, kind, what in (("outcome", dict, "an object"), ("process", dict, "an object"),
                                ("entry", str, "a string"), ("status", str, "a string")):
            if data.get(key) is not None and not isinstance(data[key], kind):
                raise RunUnreadable(f"{path}: '{key}' is not {what}", f"run.json: '{key}' is not {what}")
        return data


def patched_arm(data: Any) -> bool:
    """Whether run.json is the AFTER arm of a `kvdiag verify`: a run of a scratch build with probes applied."""
    arm = data.get("verify_arm") if isinstance(data, dict) else None
    return isinstance(arm, dict) and arm.get("arm") == "after"


def displayed_status(data: dict[str, Any]) -> str:
    """The status `kvdiag runs` shows: "abandoned" for a running run whose process is gone."""
    status = str(data.get("status"))
    if status == "running" and process_gone(data.get("process")):
        return "abandoned"
    return status


def finish_open_runs(status: str, reason: str) -> list[Path]:
    """Give every run this process left "running" a final state; best effort, never raises.

    Called by the CLI on its way out (a signal, an exception, a full disk): the run
    then says what ended it instead of staying "running" for ever. On a full disk
    the atomic write cannot make its temporary copy, so the file is rewritten in
    place with a short record (it only ever shrinks, which needs no new blocks).
    """
    done = []
    for path, run in list(_open_runs.items()):
        data: dict[str, Any]
        try:
            data = run.read()
        except (OSError, ValueError):
            data = {}
        data.update({"status": status, "reason": reason})
        try:
            run.write_record(RunRecord.from_dict(data))
        except Exception:
            try:
                short = {k: data.get(k) for k in ("entry", "kind", "step", "status", "reason")}
                with open(path / RUN_FILE, "r+b") as fh:
                    fh.write((json.dumps(short) + "\n").encode())
                    fh.truncate()
            except OSError:
                continue
        _open_runs.pop(path, None)
        done.append(path)
    return done


class RunStore:
    """All runs under a home directory, oldest first."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.root = self.home / "runs"

    def create(self, label: str, first: RunRecord | None = None) -> RunDir:
        """A new run folder, born with its run.json: ``first`` (default: a "running" run of
        ``label``). A run cut short anywhere after this (a signal, a bad build, an error) is
        then closed by :func:`finish_open_runs` with what ended it; no folder is ever left
        without a run.json for `kvdiag runs` to call unreadable. A folder whose first record
        cannot be written is removed again."""
        from kvdiag.home import home_folder

        path = home_folder(self.home, "runs") / new_run_id(label)
        path.mkdir(exist_ok=False)
        run = RunDir(path)
        try:
            run.write_record(first if first is not None else RunRecord(entry=label, status="running"))
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            _open_runs.pop(path, None)
            raise
        return run

    def all_dirs(self) -> list[RunDir]:
        """Every run folder, readable or not, in creation order."""
        if not self.root.is_dir():
            return []
        return [RunDir(p) for p in sorted((p for p in self.root.iterdir() if p.is_dir()),
                                          key=lambda p: _order_key(p.name))]

    def __iter__(self) -> Iterator[RunDir]:
        return iter(r for r in self.all_dirs() if (r.path / RUN_FILE).is_file())

    def find(self, run_id: str) -> RunDir:
        """A run by id or unique prefix; 'latest' is the newest."""
        runs = self.all_dirs()
        if run_id == "latest" and runs:
            return runs[-1]
        hits = [r for r in runs if r.run_id == run_id] or [r for r in runs if r.run_id.startswith(run_id)]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise UsageError(f"no run {run_id!r} under {self.root}")
        raise UsageError(f"run id {run_id!r} is ambiguous: {', '.join(h.run_id for h in hits[:5])}")

    def finished_records(self, label: str, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(run id, run.json's ``key``) of each finished run labelled ``label`` (`ID-bisect`, `ID-verify`)
        whose ``key`` holds a mapping, oldest first; a run.json that cannot be read is passed over."""
        for run in self.all_dirs():
            if run.label.upper() != label.upper():
                continue
            try:
                data = run.read()
            except (OSError, ValueError):
                continue
            record = data.get(key) if isinstance(data, dict) else None
            if data.get("status") == "finished" and isinstance(record, dict):
                yield run.run_id, record

    def latest_for(self, entry_id: str, skipped: list[str] | None = None) -> RunDir | None:
        """The entry's newest finished run of a build of the user's. A newer run that is unreadable
        raises RunUnreadable; newer runs that did not finish are named in ``skipped`` (so the caller
        can say so). The AFTER arm of a `kvdiag verify` (a scratch build with probes applied) is
        never the entry's run: it is passed over without a word."""
        for run in reversed(self.all_dirs()):
            if run.label.upper() != entry_id.upper():
                continue
            if not (run.path / RUN_FILE).exists():
                if skipped is not None:
                    skipped.append(f"{run.run_id} (no run.json)")
                continue
            data = run.read_checked()
            if patched_arm(data):
                continue
            if data.get("entry") == entry_id and data.get("status") == "finished":
                return run
            if skipped is not None:
                skipped.append(f"{run.run_id} ({displayed_status(data)})")
        return None
