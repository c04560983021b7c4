"""Before running anything: can this build have the defect, and is everything needed here?

`applies` conditions that are false give not-applicable (the build cannot have
the defect: the fork lacks the feature, the op, the arch is out of range).
`requires` items that are missing give skipped (something the user could
provide: a binary, compute-sanitizer, a GPU, a model). Applicability is judged
first: a build that cannot have the defect is not-applicable even when a
binary is also missing. A condition that cannot be evaluated (no CMakeCache,
no GPU to read the arch from) is not held against the entry; it becomes a note.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from kvdiag.registry.entry import Entry, Step


MODEL_ENV = "LLAMA_KV_MODEL"   # where server entries find their model, as in the seed


@dataclass(frozen=True)
class Facts:
    """What kvdiag knows about the target when it judges applicability."""

    build: Any                                   # target.build.BuildInfo
    compute_capability: tuple[int, int] | None   # of the GPU that will run it
    gpu_available: bool
    sanitizer: Path | None
    backend_ops_ops: tuple[str, ...] | None      # None: unknown (no binary, or no --list-ops)
    backend_ops_help: str | None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    server_help: Callable[[], str | None] | None = None   # llama-server --help, run on first use


@dataclass(frozen=True)
class Judgement:
    verdict: str | None      # "not-applicable" | "skipped" | None (go ahead)
    reason: str
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # what a not-applicable rests on: "build" (this build's configuration or GPU: no CUDA, an arch out of
    # range) or "source" (the tree lacks the feature: an option, a file, a test, an op, a flag)
    basis: str | None = None


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def check_applies(entry: Entry, facts: Facts, step: Step | None = None) -> tuple[str | None, list[str]]:
    """First false `applies` condition (or None), and notes on those that could not be judged. A compile
    step that names its own ``cmake_options`` is asked for those instead of the entry's."""
    reason, notes, _ = _applies(entry, facts, step)
    return reason, notes


def _applies(entry: Entry, facts: Facts, step: Step | None = None) -> tuple[str | None, list[str], str | None]:
    """First false condition, the notes, and its basis: "build" or "source" (see Judgement.basis)."""
    reason, notes = _build_conditions(entry, facts)
    if reason:
        return reason, notes, "build"
    reason, more = _source_conditions(entry, facts, step)
    return reason, notes + more, "source" if reason else None


def _build_conditions(entry: Entry, facts: Facts) -> tuple[str | None, list[str]]:
    """The GPU's arch and the build's configured values: what this build is, whatever its source."""
    applies = entry.applies
    notes: list[str] = []
    build = facts.build
    has_cache = build is not None and build.cache_path is not None
    cc = facts.compute_capability
    if (applies.cc_min or applies.cc_max) and cc is None:
        notes.append("compute capability unknown (no GPU seen): the arch range was not checked")
    elif cc is not None:
        if applies.cc_min and cc < _cc(applies.cc_min):
            return f"compute capability {cc[0]}.{cc[1]} is below {applies.cc_min}", notes
        if applies.cc_max and cc > _cc(applies.cc_max):
            return f"compute capability {cc[0]}.{cc[1]} is above {applies.cc_max}", notes
    for option, wanted in applies.cmake_values.items():
        if not has_cache:
            notes.append(f"no CMakeCache.txt: could not check {option}={wanted}")
        elif option not in build.options and option in applies.cmake_options:
            continue    # the option itself is absent: a source fact, said below
        elif str(build.options.get(option, "")).upper() != str(wanted).upper():
            return f"the build has {option}={build.options.get(option, 'unset')}, the defect needs {wanted}", notes
    return None, notes


def _source_conditions(entry: Entry, facts: Facts, step: Step | None) -> tuple[str | None, list[str]]:
    """What the tree has: options, files, tests, ops, flags. Absent means the feature is not in the source.
    A compile step's own ``cmake_options`` replace the entry's."""
    applies = entry.applies
    notes: list[str] = []
    build = facts.build
    has_cache = build is not None and build.cache_path is not None
    for option in step.required_options(applies.cmake_options) if step is not None else applies.cmake_options:
        if not has_cache:
            notes.append(f"no CMakeCache.txt: could not check for option {option}")
        elif option not in build.options:
            return f"the build has no {option} option (the feature does not exist in this tree)", notes
    reason = _tree_facts(entry, build, notes)
    if reason:
        return reason, notes
    if applies.ops:
        if facts.backend_ops_ops is None:
            notes.append("test-backend-ops op list unknown: ops not checked")
        else:
            missing = [op for op in applies.ops if op not in facts.backend_ops_ops]
            if missing:
                return f"test-backend-ops does not know {', '.join(missing)}", notes
    for flag in applies.backend_ops_flags:
        if facts.backend_ops_help is None:
            notes.append(f"test-backend-ops help unknown: {flag} not checked")
        elif flag not in facts.backend_ops_help:
            return f"this test-backend-ops has no {flag} option", notes
    wanted = applies.server_flags
    help_text = facts.server_help() if wanted and facts.server_help is not None else None
    for flag in wanted:
        if help_text is None:
            notes.append(f"llama-server help unknown (no llama-server in the build, or it printed none): "
                         f"{flag} not checked")
        elif flag not in help_text:
            return f"this llama-server does not offer {flag} (not in its --help): the feature is absent", notes
    return None, notes


class FactMismatch(Exception):
    """A fork-detection fact is absent while something close is present: the entry, not the tree, is wrong."""


def _tree_facts(entry: Entry, build, notes: list[str]) -> str | None:
    """`source_paths` and `tests`, asked of the tree exactly as `kvdiag registry verify` asks them:
    a file in either layout, a test by CTest name or tests/<name>.* source. Absent with something
    close in its place raises FactMismatch (inconclusive, never not-applicable)."""
    applies = entry.applies
    if not applies.source_paths and not applies.tests and not applies.source_facts:
        return None
    from kvdiag.workspace.tree import ABSENT, UNKNOWN, Tree

    tree = Tree.from_build_info(build) if build is not None else Tree(None)
    asked = [(f"source path {rel}", tree.file(rel)) for rel in applies.source_paths]
    asked += [(f"test {name}", tree.test(name)) for name in applies.tests]
    for what, answer in asked:
        if answer.state == UNKNOWN:
            notes.append(f"could not check for {what}: {answer.detail}")
        elif answer.state == ABSENT and answer.instead:
            raise FactMismatch(f"the registry names {what}, which this tree lacks, but the tree has "
                               f"{', '.join(answer.instead)}: the entry's fact is out of date, so its absence "
                               f"proves nothing (`kvdiag registry verify` lists every such fact)")
        elif answer.state == ABSENT:
            return f"{answer.detail} (this fork's feature is absent)"
    return _source_facts(applies.source_facts, tree, notes)


def _source_facts(facts, tree, notes: list[str]) -> str | None:
    """``[[applies.source_facts]]``: the first fact this tree lacks, quoted with where it was looked for
    (a route, a type, a build target the defect needs); a tree not at hand is a note."""
    from kvdiag.workspace.tree import ABSENT, UNKNOWN

    for fact in facts:
        answer = tree.pattern(tuple(fact["files"]), fact["pattern"])
        if answer.state == UNKNOWN:
            notes.append(f"could not check that the tree has {fact['says']}: {answer.detail}")
        elif answer.state == ABSENT:
            return f"the source has no {fact['says']}: {answer.detail}"
    return None


def check_requires(entry: Entry, step: Step, facts: Facts) -> tuple[str | None, list[str]]:
    """First missing requirement (or None), and warnings that do not stop the run."""
    req = entry.requires
    warnings: list[str] = []
    build = facts.build
    if step.kind not in ("build-check", "compile"):
        needed = step.requires_binaries if step.requires_binaries is not None else req.binaries
        missing = [b for b in needed if build is None or not build.has_binary(b)]
        if missing:
            if build is None:
                return f"missing binary: {', '.join(missing)} (no build given)", warnings
            from kvdiag.workspace.binaries import why_not_a_program

            reasons = {b: why_not_a_program(Path(build.build_dir), b) for b in missing}
            absent = [b for b, why in reasons.items() if why is None]
            parts = [f"{b}: {why}" for b, why in reasons.items() if why is not None]
            if absent:
                parts.insert(0, f"{', '.join(absent)} (not found in {build.build_dir}; build that target)")
            return "missing binary: " + "; ".join(parts), warnings
    if req.gpu and not facts.gpu_available:
        return "no CUDA GPU is visible on this machine", warnings
    if (req.sanitizer or step.sanitizer) and facts.sanitizer is None:
        return ("compute-sanitizer not found (PATH, $CUDA_HOME/bin, $KVDIAG_COMPUTE_SANITIZER; "
                "`pip install nvidia-cuda-sanitizer-api` also provides one)"), warnings
    absent = [name for name in (*req.env, *step.requires_env) if not facts.environ.get(name)]
    if absent:
        return f"needs {', '.join('$' + a for a in absent)} (e.g. a model file path)", warnings
    if req.model_keys:
        missing_model = check_model_keys(req.model_keys, facts.environ.get(MODEL_ENV))
        if missing_model:
            return missing_model, warnings
    if req.lineinfo and build is not None and build.cache_path is not None and not build.lineinfo:
        warnings.append("the build lacks -lineinfo: sanitizer sites will have no file:line "
                        "(reconfigure with -DCMAKE_CUDA_FLAGS=-lineinfo)")
    return None, warnings


def check_model_keys(keys, model: str | None) -> str | None:
    """Why the model in $LLAMA_KV_MODEL cannot serve this entry (None when it can, or when no
    model is named: the env requirement speaks for that)."""
    if not model:
        return None
    from kvdiag.model.gguf_meta import GGUFError, read_metadata

    try:
        meta = read_metadata(model)
    except (OSError, GGUFError) as exc:
        return f"${MODEL_ENV} ({model}) cannot be read as a GGUF model: {exc}"
    for key in keys:
        value = meta.arch_value(key)
        if not value:
            found = "0" if value is not None else "absent"
            return (f"the model in ${MODEL_ENV} ({Path(model).name}, architecture {meta.architecture or '?'}) "
                    f"has no {meta.architecture or '<arch>'}.{key} ({found}): this entry needs a model that has it")
    return None


def judge_applicability(entry: Entry, step: Step, facts: Facts) -> Judgement:
    try:
        reason, notes, basis = _applies(entry, facts, step)
    except FactMismatch as exc:
        return Judgement("inconclusive", str(exc))
    if reason:
        return Judgement("not-applicable", reason, tuple(notes), basis=basis)
    missing, warnings = check_requires(entry, step, facts)
    if missing:
        return Judgement("skipped", missing, tuple(notes), tuple(warnings))
    return Judgement(None, "", tuple(notes), tuple(warnings))
