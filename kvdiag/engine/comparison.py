"""A step's comparison arm: a signature-less step run once after the step, on the same build.

Some defects are a ratio between two configurations (D5: the host compute buffer
with a KVarN cache against the same server with q8_0). The verdict is the judged
step's; the arm runs in the same run folder, so its figure comes from the same
build, model and machine, and the lines its ``expect`` patterns match are quoted
beside the verdict.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from kvdiag.engine.judge import quote_seen
from kvdiag.engine.verdict import Attempt, Verdict
from kvdiag.registry.entry import Entry, Step
from kvdiag.store.runs import RunDir

# A judged step that ended like this ran nothing worth comparing against.
NOTHING_TO_COMPARE = (Verdict.SKIPPED, Verdict.NOT_APPLICABLE, Verdict.ERROR)


def run_comparison(entry: Entry, step: Step, verdict: Verdict, run_dir: RunDir,
                   attempt: Callable[[Step], Attempt]) -> dict[str, Any] | None:
    """Run ``step.compare_with`` once through ``attempt`` and say what its ``expect`` patterns saw."""
    arm = entry.step(step.compare_with) if step.compare_with else None
    if arm is None or verdict in NOTHING_TO_COMPARE:
        return None
    result = attempt(arm)
    text = "".join(_read(run_dir, command) for command in result.commands)
    seen = [quote_seen(p, text) for p in arm.expect if re.search(p, text, re.M)]
    missing = [f"/{p}/" for p in arm.expect if not re.search(p, text, re.M)]
    logs = [command.get("combined_path") for command in result.commands if command.get("combined_path")]
    return {"step": arm.name, "seen": seen, "missing": missing, "exit": result.evidence.exit or result.reason,
            "logs": logs}


def describe_comparison(found: Mapping[str, Any]) -> str:
    """One line for the verdict's reason: the arm's quoted lines, or what it did not print."""
    text = f"comparison arm {found['step']}: "
    if found.get("seen"):
        text += "; ".join(found["seen"])
    if found.get("missing"):
        text += ("; " if found.get("seen") else "") + f"{', '.join(found['missing'])} not seen ({found.get('exit')})"
    return text


def _read(run_dir: RunDir, command: Mapping[str, Any]) -> str:
    path = command.get("combined_path")
    if not path:
        return ""
    file = run_dir.path / path
    return file.read_text(errors="replace") if file.is_file() else ""
