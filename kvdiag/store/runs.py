"""The run store: `<home>/runs/<run-id>/` with run.json and the logs of every command.

run.json is written at the start (status "running") and replaced atomically at
the end, so a run killed halfway still leaves its argv, environment and the
logs streamed so far, and `kvdiag runs` shows it as unfinished.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kvdiag.errors import UsageError
from kvdiag.records.run import RunRecord, stamp_run

RUN_FILE = "run.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    """One run's directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

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
        """Write ``name`` atomically; run.json gets its ``schema_version`` here, whoever writes it."""
        target = self.path / name
        write_json_atomic(target, stamp_run(data) if name == RUN_FILE else data)
        return target

    def record(self) -> RunRecord:
        """run.json as a typed record (a 0.1.x file, without schema_version, reads as version 1)."""
        return RunRecord.from_dict(self.read())

    def read(self, name: str = RUN_FILE) -> dict[str, Any]:
        return json.loads((self.path / name).read_text(encoding="utf-8"))


class RunStore:
    """All runs under a home directory, newest last."""

    def __init__(self, home: Path):
        self.root = home / "runs"

    def create(self, label: str) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        path = self.root / f"{stamp}-{label}-{secrets.token_hex(2)}"
        path.mkdir(parents=True, exist_ok=False)
        return RunDir(path)

    def __iter__(self) -> Iterator[RunDir]:
        if not self.root.is_dir():
            return iter(())
        return iter(RunDir(p) for p in sorted(self.root.iterdir()) if (p / RUN_FILE).is_file())

    def find(self, run_id: str) -> RunDir:
        """A run by id or unique prefix; 'latest' is the newest."""
        runs = list(self)
        if run_id == "latest" and runs:
            return runs[-1]
        hits = [r for r in runs if r.run_id == run_id] or [r for r in runs if r.run_id.startswith(run_id)]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise UsageError(f"no run {run_id!r} under {self.root}")
        raise UsageError(f"run id {run_id!r} is ambiguous: {', '.join(h.run_id for h in hits[:5])}")

    def latest_for(self, entry_id: str) -> RunDir | None:
        for run in reversed(list(self)):
            try:
                if run.read().get("entry") == entry_id and run.read().get("status") == "finished":
                    return run
            except (OSError, ValueError):
                continue
        return None
