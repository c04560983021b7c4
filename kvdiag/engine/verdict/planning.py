"""Turning a step's argv templates into real argv lists.

Every argument is its own template and renders to exactly one argv element, so
nothing is ever re-split or passed through a shell: a params regex full of
brackets and backslashes reaches the program byte for byte. Undefined variables
raise (StrictUndefined) instead of rendering as ''. Templates render in the
registry's sandbox (kvdiag.registry.sandbox): a template that reaches for code is
a TemplateProblem, never executed — `show` and `run` render through this one path.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jinja2

from kvdiag.engine.verdict.launch_program import PROGRAM_NOTE, uses_program
from kvdiag.engine.verdict.wrapping import wrap_with_sanitizer
from kvdiag.errors import TemplateProblem, UnsafeTemplate
from kvdiag.proc.sanitizer import find_sanitizer
from kvdiag.registry.entry import Entry, Step
from kvdiag.registry.sandbox import SecurityError, render_template
from kvdiag.workspace.build import inspect_build


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


def _compile_display(step: Step, build) -> str:
    """A compile step's configure line, and the objects it builds (found by ninja at run time)."""
    if build.source_dir is None:
        return "(a compile step needs the build's source tree: none is recorded in its CMakeCache.txt)"
    from kvdiag.engine.verdict.compile_check import scratch_key
    from kvdiag.home import kvdiag_home
    from kvdiag.workspace.kept_build import SCRATCH_DIR, KeptBuild, configure_argv

    scratch = KeptBuild(kvdiag_home() / SCRATCH_DIR, scratch_key(step, build))
    objects = " ".join(f"<object of {s}>" for s in step.sources)
    reuse = "  # configured already: reused" if scratch.configured() else ""
    return (f"{shlex.join(configure_argv(scratch.key, scratch.path))}{reuse}\n    "
            f"ninja -C {shlex.quote(str(scratch.path))} -k 0 {objects}")


def _in_build_format(entry: Entry, build) -> Entry:
    """The entry's case regexes as `run` renders them for this build (engine.verdict.case_forms)."""
    from kvdiag.engine.verdict.case_forms import adapt_entry
    from kvdiag.parse.case_format import CaseFormat
    from kvdiag.workspace.backend_ops import program_kv_types

    binary = build.binary("test-backend-ops")
    return adapt_entry(entry, CaseFormat(program_kv_types(binary) if binary is not None else None))


def plan_commands_for_display(entry: Entry, build_dir: Path) -> dict[str, Any]:
    """What `kvdiag show ID --build DIR` prints: each step's argv against that build."""
    from kvdiag.engine.verdict.placement import tree_range_evidence
    from kvdiag.workspace.history import TreeHistory

    with tempfile.TemporaryDirectory(prefix="kvdiag-show-") as tmp:
        build = inspect_build(build_dir, log_dir=Path(tmp), check_staleness=False)
        entry = _in_build_format(entry, build)
        presence = tree_range_evidence(entry, TreeHistory(build.source_dir, Path(tmp)),
                                       dirty=bool(build.git is not None and build.git.dirty))
    out = []
    for step in entry.steps:
        item: dict[str, Any] = {"step": step.name, "problem": None, "argv": None, "shell": None}
        needed = step.requires_binaries if step.requires_binaries is not None else entry.requires.binaries
        missing = [b for b in needed if not build.has_binary(b)]
        if missing and step.kind not in ("build-check", "compile"):
            item["problem"] = f"the build has no {', '.join(missing)}"
        elif step.kind == "build-check":
            item["shell"] = f"(staleness dry run of {build_dir})"
        elif step.kind == "compile":
            item["shell"] = _compile_display(step, build)
        else:
            try:
                ctx = template_context(entry, step, binaries=build.binaries, build_dir=build.build_dir,
                                       source_dir=build.source_dir, scratch=Path("<run-dir>/scratch"))
                planned = render_step(step, ctx)
            except TemplateProblem as exc:
                item["problem"] = str(exc)
            else:
                commands = [wrap_with_sanitizer(step, cmd, Path("<run-dir>/sanitizer.log"), sanitizer=find_sanitizer())
                            for cmd in planned.commands]
                item["argv"] = [list(c) for c in commands]
                env = " ".join(f"{k}={shlex.quote(v)}" for k, v in planned.env.items())
                item["shell"] = "\n    ".join((env + " " if env else "") + shlex.join(c) for c in commands)
                if uses_program(step):
                    item["program_note"] = PROGRAM_NOTE
        out.append(item)
    return {"build_dir": str(build_dir), "commands": out, "range": presence.to_dict()}
