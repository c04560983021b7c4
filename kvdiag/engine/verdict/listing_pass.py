"""The launches of a sanitized step, listed by a run of the same commands without the sanitizer.

kvdiag's CUPTI launch lister (kvdiag.workspace.launch_lister) cannot subscribe beside
compute-sanitizer: CUPTI answers CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
(measured on an H100, compute-sanitizer 2025.3.1, memcheck and synccheck), and the
lister then says nothing, so the sanitized run lists no launch. Which kernels a
case launches is decided by the host code from its shapes, types and GPU, the same
with or without a sanitizer (the scan's route phase rests on it and checks it,
engine.scan.phases.launch_changes). So where the launch probe is not in use, a
sanitized verdict run is listed by one more run of its commands, bare, under the
lister: a second or two for a test-backend-ops case. The verdict says so.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvdiag.engine.verdict.launch_program import LAUNCH_ENV, lister_for, with_lister
from kvdiag.engine.evidence.observe import Observations
from kvdiag.parse.launches import confirmed_listing, parse_launches
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.workspace.launch_lister import LISTER_NAME

__all__ = ["listed_without_sanitizer"]


def listed_without_sanitizer(obs: Observations, planned, target, log_dir: Path, name: str, timeout: float,
                             cancel=None) -> Observations:
    """``obs`` with the launches of a bare, listed run of ``planned`` when its own run listed none and
    the CUPTI lister can list them; ``obs`` unchanged otherwise (nothing is run)."""
    step = obs.step
    if obs.launch_listed or not step.sanitizer or planned.env.get(LAUNCH_ENV) == "1":
        return obs
    library = lister_for(step, target)
    if library is None:
        return obs
    listed = with_lister(planned, library)
    texts = []
    for j, command in enumerate(listed.commands):
        try:
            result = run_command(tuple(command), timeout=timeout, log_dir=log_dir, name=f"{name}-launches-{j + 1}",
                                 env_overrides=dict(listed.env), tty=True, cancel=cancel)
        except (CommandInterrupted, CommandNotFound):
            return obs
        texts.append(strip_ansi(result.stdout_text()))
    text = "".join(texts)
    if confirmed_listing(LISTER_NAME, text) is None:
        return obs
    return dataclasses.replace(obs, launches=parse_launches(text), launch_listed=True,
                               launch_lister=f"{LISTER_NAME} (the same commands run without {step.sanitizer})")
