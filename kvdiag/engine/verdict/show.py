"""What `kvdiag show ID --build DIR` prints: each step's argv against that build, as `run` would plan it.

The argv render through the same templates as a run's (engine.verdict.planning), in the entry's
case form for the build (engine.verdict.plan), with the sanitizer in front as a run puts it
(engine.verdict.processes); a compile step shows its scratch configure and build.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any

from kvdiag.engine.verdict.launch_program import PROGRAM_NOTE, uses_program
from kvdiag.engine.verdict.planning import render_step, template_context
from kvdiag.engine.verdict.processes import wrap_with_sanitizer
from kvdiag.errors import TemplateProblem
from kvdiag.proc.sanitizer import find_sanitizer
from kvdiag.registry.entry import Entry, Step
from kvdiag.workspace.build import inspect_build


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
    """The entry's case regexes as `run` renders them for this build (engine.verdict.plan)."""
    from kvdiag.engine.verdict.plan import adapt_entry
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
                commands = [wrap_with_sanitizer(step, cmd, Path("<run-dir>/sanitizer.log"), find_sanitizer(),
                                                planned.env) for cmd in planned.commands]     # as `run` would
                item["argv"] = [list(c) for c in commands]
                env = " ".join(f"{k}={shlex.quote(v)}" for k, v in planned.env.items())
                item["shell"] = "\n    ".join((env + " " if env else "") + shlex.join(c) for c in commands)
                if uses_program(step):
                    item["program_note"] = PROGRAM_NOTE
        out.append(item)
    return {"build_dir": str(build_dir), "commands": out, "range": presence.to_dict()}
