"""Control results per machine, and the gate that turns them into permission.

``<home>/controls.json`` maps an environment key (``Environment.key()``: GPU and
compute capability, driver, runtime, nvcc, compute-sanitizer) to one record per
tool::

    {"<env_key>": {"synccheck": {"passed": true, "date": "2026-11-29T16:40:00+00:00",
                                 "detail": "...", "launcher": "cupy", "versions": {...}, ...}}}

A new driver, toolkit or sanitizer gives a new key, so a control proven on the
old one is simply absent for the new one and runs again.

The engine asks :func:`not_reproduced_gate` before it issues ``not-reproduced``
from a sanitizer step, and ``doctor.ensure_control`` to run a missing control
lazily, so ``kvdiag run`` works without a prior ``kvdiag doctor``.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from kvdiag.controls.gate import Gate
from kvdiag.errors import HarnessError
from kvdiag.fileio import parse_json

__all__ = [
    "CONTROLS_FILE",
    "ControlRecord",
    "Gate",
    "control_run_lock",
    "load_control",
    "load_controls",
    "not_reproduced_gate",
    "store_controls",
    "store_record",
]

CONTROLS_FILE = "controls.json"


@dataclass(frozen=True)
class ControlRecord:
    """One tool's control outcome on one machine (env key)."""

    env_key: str
    tool: str
    passed: bool
    date: str                          # ISO-8601, UTC
    detail: str
    launcher: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    positive_detected: bool | None = None
    positive_detail: str = ""
    negative_clean: bool | None = None
    negative_detail: str = ""
    log_dir: str | None = None

    @property
    def day(self) -> str:
        return self.date[:10]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "date": self.date,
            "detail": self.detail,
            "launcher": self.launcher,
            "versions": dict(self.versions),
            "positive_detected": self.positive_detected,
            "positive_detail": self.positive_detail,
            "negative_clean": self.negative_clean,
            "negative_detail": self.negative_detail,
            "log_dir": self.log_dir,
        }

    @classmethod
    def from_json(cls, env_key: str, tool: str, doc: dict[str, Any]) -> "ControlRecord":
        return cls(
            env_key=env_key,
            tool=tool,
            passed=bool(doc.get("passed")),
            date=str(doc.get("date") or ""),
            detail=str(doc.get("detail") or ""),
            launcher=doc.get("launcher"),
            versions=dict(doc.get("versions") or {}),
            positive_detected=doc.get("positive_detected"),
            positive_detail=str(doc.get("positive_detail") or ""),
            negative_clean=doc.get("negative_clean"),
            negative_detail=str(doc.get("negative_detail") or ""),
            log_dir=doc.get("log_dir"),
        )


# --------------------------------------------------------------------------- file


def _path(home: Path) -> Path:
    return Path(home) / CONTROLS_FILE


@contextmanager
def control_run_lock(home: Path, tool: str) -> Iterator[None]:
    """Held while ``tool``'s control runs, so threads and processes run it once, not side by side."""
    with _locked(home, f"run-{tool}"):
        yield


@contextmanager
def _locked(home: Path, purpose: str = "file") -> Iterator[None]:
    """An exclusive lock (per purpose) around read-modify-write of controls.json or a control
    run. flock on a fresh open file: it excludes other threads of this process as well as
    other kvdiag processes."""
    Path(home).mkdir(parents=True, exist_ok=True)
    name = f".{CONTROLS_FILE}.lock" if purpose == "file" else f".{CONTROLS_FILE}.{purpose}.lock"
    with open(Path(home) / name, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _read(home: Path) -> dict[str, Any]:
    path = _path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc}") from None
    try:
        doc = parse_json(text)
    except ValueError:
        # A torn or hand-broken cache proves nothing: treat it as empty, controls run again.
        return {}
    return doc if isinstance(doc, dict) else {}


def _write(home: Path, doc: dict[str, Any]) -> None:
    path = _path(home)
    fd, tmp = tempfile.mkstemp(prefix=f".{CONTROLS_FILE}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_controls(home: Path, env_key: str) -> dict[str, ControlRecord]:
    """Every tool's record for ``env_key`` (empty when none)."""
    entry = _read(home).get(env_key)
    if not isinstance(entry, dict):
        return {}
    return {tool: ControlRecord.from_json(env_key, tool, doc)
            for tool, doc in entry.items() if isinstance(doc, dict)}


def load_control(home: Path, env_key: str, tool: str) -> ControlRecord | None:
    """The record of ``tool``'s control on the machine ``env_key``, None if it never ran there."""
    return load_controls(home, env_key).get(tool)


def _put(doc: dict[str, Any], record: ControlRecord) -> None:
    """Set one tool's record under its machine key, keeping the key's other tools."""
    entry = doc.get(record.env_key)
    if not isinstance(entry, dict):
        entry = {}
    entry[record.tool] = record.to_json()
    doc[record.env_key] = entry


def store_record(home: Path, record: ControlRecord) -> None:
    """Write (replace) one tool's record, keeping every other one."""
    with _locked(home):
        doc = _read(home)
        _put(doc, record)
        _write(home, doc)


def store_controls(home: Path, records: Iterable[ControlRecord | None]) -> list[ControlRecord]:
    """Record every control the doctor actually ran (cached ones are rewritten unchanged)."""
    records = [r for r in records if r is not None]
    if not records:
        return []
    with _locked(home):
        doc = _read(home)
        for record in records:
            _put(doc, record)
        _write(home, doc)
    return records


# --------------------------------------------------------------------------- the gate


def gate_for_record(tool: str, record: ControlRecord | None) -> Gate:
    if record is None:
        return Gate(False, f"{tool}'s control has not run on this machine: run `kvdiag doctor`")
    if record.passed:
        launcher = f" (launcher {record.launcher})" if record.launcher else ""
        return Gate(True, f"{tool} control passed on this machine on {record.day}{launcher}")
    if record.positive_detected is False:
        why = record.positive_detail or record.detail
        return Gate(False, f"{tool}'s positive control was not detected on this machine: {why}")
    if record.negative_clean is False:
        why = record.negative_detail or record.detail
        return Gate(False, f"{tool}'s negative control was not clean on this machine: {why}")
    return Gate(False, f"{tool}'s control did not pass on this machine: {record.detail}")


def not_reproduced_gate(home: Path, env_key: str, tool: str | None) -> Gate:
    """May a step checked by ``tool`` end ``not-reproduced`` on the machine ``env_key``?

    ``tool`` None (no sanitizer in the step): allowed; the engine's own "cases
    executed" check covers those steps.
    """
    if tool is None:
        return Gate(True, "no sanitizer in this step: no detector control needed")
    return gate_for_record(tool, load_control(home, env_key, tool))
