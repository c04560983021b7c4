"""What a run asks for (`RunOptions`), and each attempt's plan: a step's argv templates turned into argv lists.

Every argument is its own template and renders to exactly one argv element, so
nothing is ever re-split or passed through a shell: a params regex full of
brackets and backslashes reaches the program byte for byte. Undefined variables
raise (StrictUndefined) instead of rendering as ''. Templates render in the
registry's sandbox (kvdiag.registry.sandbox): a template that reaches for code is
a TemplateProblem, never executed — `show` and `run` render through this one path.

`plan_step` is the plan of one attempt: the rendered commands, the program they run
(the launch probe's test-backend-ops, or the user's listed by the CUPTI lister:
engine.verdict.launch_program) and the GPU they are pinned to (engine.verdict.devices).
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import jinja2

from kvdiag.engine.verdict.devices import visible_value
from kvdiag.engine.verdict.launch_program import PROGRAM, lister_for, program_for, with_lister, with_program
from kvdiag.errors import TemplateProblem, UnsafeTemplate
from kvdiag.progress import Progress
from kvdiag.registry.entry import Entry, Step
from kvdiag.registry.sandbox import SecurityError, render_template
from kvdiag.store.runs import RunDir


@dataclass
class RunOptions:
    """What a run of an entry is asked for, beyond the entry: by `kvdiag run` and every verb that runs one."""

    step: str | None = None
    runs: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    slots: int = 1
    progress: Progress | None = None
    cancel: threading.Event | None = None     # set by another thread to stop a scan's workers
    device: Any = None                        # a GpuDevice to pin the processes to (multi-GPU hosts)
    # After the verdict: find the case a walk died in without naming it (kvdiag.engine.run.attribution
    # .attribute_outcome, set by the commands; it sits above this module, so it is handed in).
    attribute: Callable[..., dict] | None = None
    step_budget: float | None = None          # seconds a step may run (None: from the step, see engine.verdict.processes)
    skip_builds: bool = False                 # steps that compile code are skipped (`sweep --skip-builds`)
    # The judged step's comparison arm, read by relative matchers (set by run_entry, see engine.verdict.comparison).
    comparison: Callable[[], Any] | None = None
    scan_case: bool = False                   # one case of `kvdiag scan`: sanitized cases run GPU-only (the
                                              # launch probe's launch mode) and the launch gate judges per case
    record: Mapping[str, Any] = field(default_factory=dict)   # more run.json keys (verify names its arm)

    @property
    def cancelled(self) -> bool:
        """Whether the caller's cancel event stopped this run: its commands then ended as on Ctrl-C
        (returned, not raised, see run_command), and the run is recorded as interrupted like one."""
        return self.cancel is not None and self.cancel.is_set()


@dataclass(frozen=True)
class PlannedStep:
    """The rendered commands of one step, before any sanitizer is put in front."""

    step: Step
    commands: tuple[tuple[str, ...], ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def shell_lines(self) -> list[str]:
        """For display only: each command as a copy-pasteable shell line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return [(env + " " if env else "") + shlex.join(cmd) for cmd in self.commands]


def template_context(
    entry: Entry,
    step: Step,
    *,
    binaries: Mapping[str, Path],
    build_dir: Path | None,
    source_dir: Path | None,
    scratch: Path,
    backend: str = "CUDA0",
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Everything a template may read: schema.TEMPLATE_GLOBALS plus the step's vars."""
    environ = os.environ if environ is None else environ
    wanted_env = (*entry.requires.env, *step.requires_env)
    context: dict[str, Any] = {
        "bin": {name: str(path) for name, path in binaries.items()},
        "build_dir": str(build_dir) if build_dir else None,
        "source_dir": str(source_dir) if source_dir else None,
        "backend": backend,
        "scratch": str(scratch),
        "env": {name: environ[name] for name in wanted_env if name in environ},
        "model": environ.get("LLAMA_KV_MODEL"),
        "seed": 1234,
    }
    context.update(step.vars)
    context.update(overrides or {})
    return context


def render_step(step: Step, context: Mapping[str, Any]) -> PlannedStep:
    """Render every argument of every command of the step."""
    try:
        commands = tuple(tuple(_render(arg, context) for arg in cmd) for cmd in step.command_templates)
        env = {k: _render(v, context) for k, v in step.env.items()}
    except jinja2.UndefinedError as exc:
        raise TemplateProblem(f"step {step.name!r}: {exc.message}") from None
    except SecurityError as exc:
        raise UnsafeTemplate(f"step {step.name!r}: template refused by the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateProblem(f"step {step.name!r}: template does not render: {exc}") from None
    return PlannedStep(step=step, commands=commands, env=env)


def _render(template: str, context: Mapping[str, Any]) -> str:
    return render_template(template, context)


_REGEX_SPECIAL = re.compile(r"[\\^$.|?*+()\[\]{}]")


def escape_params(params: str) -> str:
    """A case's exact parameter string as a regex for `test-backend-ops -p` (std::regex ECMAScript)."""
    return _REGEX_SPECIAL.sub(r"\\\g<0>", params)


def plan_step(entry: Entry, step: Step, target, run_dir: RunDir, options: RunOptions) -> PlannedStep:
    """One attempt's commands against the target (engine.verdict.target.Target), before any sanitizer is
    put in front: rendered, run by the probe's program or listed by the CUPTI lister, pinned to the device."""
    build = target.build
    binaries = dict(build.binaries) if build else {}
    program = program_for(step, target)       # the launch probe's build of test-backend-ops, when it exists
    if program is not None:
        binaries[PROGRAM] = program
    context = template_context(
        entry, step, binaries=binaries, build_dir=build.build_dir if build else None,
        source_dir=build.source_dir if build else None, scratch=run_dir.scratch, overrides=options.overrides)
    planned = render_step(step, context)
    if program is not None:
        planned = with_program(planned, program, launch_mode=options.scan_case and bool(step.sanitizer))
    elif not step.sanitizer and (library := lister_for(step, target)) is not None:
        # the probe did not apply to this tree: list through CUPTI (which cannot subscribe beside
        # compute-sanitizer, so a sanitized step is listed by a scan's route phase instead)
        planned = with_lister(planned, library)
    if options.device is not None:
        planned = replace(planned, env={**planned.env, "CUDA_VISIBLE_DEVICES": visible_value(options.device)})
    return planned
