"""Which test-backend-ops a step runs: the user's, or the launch probe's build of it.

The launch probe (``probes/test-backend-ops-launch.patch``, made by
:mod:`kvdiag.probes.program_rebuild`) is the user's test-backend-ops with two additions:
every kernel launch printed when ``KVDIAG_PRINT_LAUNCHES`` is set (launch proof, for
every backend-ops step), and a ``launch`` mode that runs each case on the GPU only, with
no CPU reference (for sanitized scans, where a sanitizer is the detector and the
numeric comparison is the cost). When the program cannot be made (not a ninja build, no
compiler, the patch does not apply) the user's program runs, listed by kvdiag's CUPTI
launch lister when it could be built (kvdiag.workspace.launch_lister: loaded by the CUDA
driver, whatever the program's source), and unlisted otherwise; the run says which.

The CUPTI lister cannot subscribe beside compute-sanitizer: CUPTI answers
CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (measured on an H100, compute-sanitizer
2025.3.1, memcheck and synccheck), and the lister then says nothing, so a sanitized run
lists no launch. Which kernels a case launches is decided by the host code from its
shapes, types and GPU, the same with or without a sanitizer (the scan's route phase rests
on it and checks it, engine.scan.phases.launch_changes). So where the launch probe is not
in use, a sanitized verdict run is listed by one more run of its commands, bare, under the
lister (:func:`listed_without_sanitizer`): a second or two for a test-backend-ops case. The
verdict says so.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from kvdiag.parse.launches import PROBE_LISTER, confirmed_listing, parse_launches
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import CommandInterrupted, CommandNotFound, run_command
from kvdiag.registry.entry import Step

LAUNCH_ENV = "KVDIAG_PRINT_LAUNCHES"
INJECTION_ENV = "CUDA_INJECTION64_PATH"   # the CUDA driver loads the library it names (the CUPTI lister)
LISTED_STEP_KINDS = ("backend-ops", "server")
LAUNCH_PROBE = "test-backend-ops-launch"
PROGRAM = "test-backend-ops"
DISABLE_ENV = "KVDIAG_PROBE_PROGRAM"      # "0": always run the user's program
PROGRAM_NOTE = (f"run executes kvdiag's launch-probe build of this test-backend-ops when it can make one: the same "
                f"program, each kernel launch printed ({LAUNCH_ENV}=1); {DISABLE_ENV}=0 runs this one")


def uses_program(step: Step) -> bool:
    """The step runs test-backend-ops (its first argument renders from bin['test-backend-ops'])."""
    return step.kind == "backend-ops" and any(
        cmd and PROGRAM in cmd[0] for cmd in step.command_templates)


def disabled_reason() -> str | None:
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return f"{DISABLE_ENV}=0"
    return None


def program_for(step: Step, target) -> Path | None:
    """The probe's program for this step, or None (the user's program runs)."""
    if not uses_program(step) or getattr(target, "probe_program", None) is None:
        return None
    program = target.probe_program()
    return program.path if program.available else None


def with_program(planned, program: Path, *, launch_mode: bool):
    """The planned step with launches printed, and in ``launch`` mode instead of ``test``
    when asked (a sanitized scan): the rest of each argv is exactly the entry's."""
    commands = planned.commands
    if launch_mode:
        commands = tuple(_launch_argv(cmd, program) for cmd in commands)
    return replace(planned, commands=commands, env={**planned.env, LAUNCH_ENV: "1"})


def _launch_argv(argv: tuple[str, ...], program: Path) -> tuple[str, ...]:
    if len(argv) > 1 and argv[0] == str(program) and argv[1] == "test":
        return (argv[0], "launch", *argv[2:])
    return argv


def lister_for(step: Step, target) -> Path | None:
    """The CUPTI launch lister for a step that runs a CUDA program (test-backend-ops, llama-server), or None."""
    if step.kind not in LISTED_STEP_KINDS or getattr(target, "launch_lister", None) is None:
        return None
    library = target.launch_lister()
    return library.path if library.available else None


def with_lister(planned, library: Path):
    """The planned step with the CUPTI lister injected and its lines on stdout (the argv is the entry's)."""
    return replace(planned, env={**planned.env, LAUNCH_ENV: "1", INJECTION_ENV: str(library)})


def launch_listed(planned) -> str | None:
    """Which lister the planned step asked for ("launch probe", "CUPTI injection"), or None."""
    if planned.env.get(LAUNCH_ENV) != "1":
        return None
    from kvdiag.workspace.launch_lister import LISTER_NAME

    return LISTER_NAME if planned.env.get(INJECTION_ENV) else PROBE_LISTER


def listed_without_sanitizer(obs, planned, target, log_dir: Path, name: str, timeout: float, cancel=None):
    """``obs`` (the sanitized run's Observations, engine.evidence.observe) with the launches of a bare,
    listed run of ``planned`` when its own run listed none and the CUPTI lister can list them; ``obs``
    unchanged otherwise (nothing is run)."""
    from kvdiag.workspace.launch_lister import LISTER_NAME

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
    return replace(obs, launches=parse_launches(text), launch_listed=True,
                   launch_lister=f"{LISTER_NAME} (the same commands run without {step.sanitizer})")
