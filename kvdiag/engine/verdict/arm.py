"""What makes two runs of an entry the same arm, recorded in every run and compared by `verify --before`.

D3 at the seed's scale is ten fresh llama-servers on a 27 GiB model; ``kvdiag verify``
would pay for them twice if its BEFORE arm always ran again. It may instead stand in
a recorded run (``--before RUN``), but only one that is the run verify would make:

* the same entry, step and step variables (``--set``);
* the same repro: the step's table as the registry writes it (argv template, env, vars,
  timeout, sanitizer, what a clean run must show), its comparison arm's, and the
  signature that judged it;
* the same build: its folder, its commit, and the stamps (kvdiag.workspace.stamps) of the
  step's programs and of every shared library beside them;
* the same inputs: each environment variable the step reads (``$LLAMA_KV_MODEL``) names
  the same file, by its stamp (or has the same value, when it names no file);
* the same kind of machine: the GPUs (name, compute capability) and the driver.

`arm_record` is written into run.json (``arm``) when a run starts; `arm_differences`
names every field in which a recorded arm and the arm of now differ, one phrase each.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from kvdiag.registry.entry import Entry, Step, matchers_for
from kvdiag.workspace.stamps import build_files, describe_stamp, file_stamp

ARM_FORMAT = 1
# Keys of a repro table that do not change what runs or how it is judged.
_NOT_THE_ARM = ("description", "expected_seconds", "default", "runs")
_ENV_NAME = re.compile(r"\benv(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")
MODEL_ENV = "LLAMA_KV_MODEL"


def arm_record(entry: Entry, step: Step, target: Any, *, runs: int, overrides: Mapping[str, Any],
               environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The arm a run of ``step`` on ``target`` is, as run.json keeps it (only ``os.stat`` is asked)."""
    environ = os.environ if environ is None else environ
    return {
        "format": ARM_FORMAT, "entry": entry.id, "step": step.name, "runs": runs,
        "overrides": {str(k): v for k, v in sorted(overrides.items())},
        "repro": _repro(entry, step),
        "build": _build(entry, step, getattr(target, "build", None)),
        "inputs": {name: _input(environ.get(name)) for name in input_names(entry, step)},
        "machine": _machine(getattr(target, "environment", None)),
    }


def input_names(entry: Entry, step: Step) -> list[str]:
    """The environment variables the step reads: its entry's and its own requirements, every
    ``env.NAME`` its templates name, and $LLAMA_KV_MODEL when a template reads ``model``."""
    names = [*entry.requires.env, *step.requires_env]
    texts = [arg for command in step.command_templates for arg in command] + list(step.env.values())
    for text in texts:
        names += [a or b for a, b in _ENV_NAME.findall(text)]
        if re.search(r"\bmodel\b", text) and "{{" in text:
            names.append(MODEL_ENV)
    return sorted(dict.fromkeys(names))


def arm_differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """One phrase per way the recorded arm is not the arm of now (empty: the same arm)."""
    out = []
    for key, label in (("entry", "the entry"), ("step", "the step")):
        if recorded.get(key) != now.get(key):
            out.append(f"{label} differs ({recorded.get(key)} then, {now.get(key)} now)")
    if dict(recorded.get("overrides") or {}) != dict(now.get("overrides") or {}):
        out.append(f"the step variables differ ({_vars(recorded.get('overrides'))} then, "
                   f"{_vars(now.get('overrides'))} now)")
    out += _repro_differences(recorded.get("repro") or {}, now.get("repro") or {})
    out += _build_differences(recorded.get("build"), now.get("build"))
    out += _input_differences(recorded.get("inputs") or {}, now.get("inputs") or {})
    if recorded.get("machine") != now.get("machine"):
        out.append(f"the machine differs ({_machine_text(recorded.get('machine'))} then, "
                   f"{_machine_text(now.get('machine'))} now)")
    return out


# --------------------------------------------------------------------------- what is recorded


def _repro(entry: Entry, step: Step) -> dict[str, Any]:
    tables = {str(t.get("name")): t for t in entry.raw.get("repro") or () if isinstance(t, Mapping)}

    def table(name: str | None) -> dict[str, Any] | None:
        raw = tables.get(str(name))
        return {k: v for k, v in sorted(raw.items()) if k not in _NOT_THE_ARM} if raw is not None else None

    return {"step": table(step.name), "comparison_arm": table(step.compare_with) if step.compare_with else None,
            "signature": [dict(m.fields) for m in matchers_for(entry, step.name)]}


def _build(entry: Entry, step: Step, build: Any) -> dict[str, Any] | None:
    if build is None:
        return None
    wanted = step.requires_binaries if step.requires_binaries is not None else entry.requires.binaries
    binaries = getattr(build, "binaries", None) or {}
    programs = {name: binaries[name] for name in wanted if name in binaries}
    git = getattr(build, "git", None)
    return {"dir": os.path.realpath(build.build_dir), "commit": git.commit if git is not None else None,
            "files": build_files(build.build_dir, programs)}


def _input(value: str | None) -> dict[str, Any]:
    if value is None:
        return {"value": None}
    stamp = file_stamp(value) if value else None
    return {"value": value, **({"file": stamp} if stamp else {})}


def _machine(environment: Any) -> dict[str, Any] | None:
    gpu = getattr(environment, "gpu", None)
    if gpu is None:
        return None
    return {"gpus": [[d.name, d.cc_str] for d in gpu.devices], "driver": gpu.driver_version}


# --------------------------------------------------------------------------- how it differs


def _repro_differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    out = []
    for part, label in (("step", "the repro step"), ("comparison_arm", "the comparison arm's step")):
        a, b = recorded.get(part) or {}, now.get(part) or {}
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if keys:
            out.append(f"{label}'s {', '.join(keys)} differ{'s' if len(keys) == 1 else ''} in the registry")
    if recorded.get("signature") != now.get("signature"):
        out.append("the entry's signature differs in the registry")
    return out


def _build_differences(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    if recorded is None or now is None:
        return [] if recorded == now else [f"the build differs ({_dir(recorded)} then, {_dir(now)} now)"]
    if recorded.get("dir") != now.get("dir"):
        return [f"the build differs ({recorded.get('dir')} then, {now.get('dir')} now)"]
    out = []
    if recorded.get("commit") != now.get("commit"):
        out.append(f"the build's commit differs ({_short(recorded.get('commit'))} then, "
                   f"{_short(now.get('commit'))} now)")
    a, b = recorded.get("files") or {}, now.get("files") or {}
    changed = [f"{name} ({describe_stamp(a.get(name))} then, {describe_stamp(b.get(name))} now)"
               for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]
    if changed:
        out.append("the build's files differ (rebuilt since?): " + "; ".join(changed))
    return out


def _input_differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    out = []
    for name in sorted(set(recorded) | set(now)):
        why = _input_difference(name, recorded.get(name) or {"value": None}, now.get(name) or {"value": None})
        if why:
            out.append(why)
    return out


def _input_difference(name: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """A variable naming a file is judged by the file (the same file spelled another way is the same
    input), any other by its value."""
    fa, fb = a.get("file"), b.get("file")
    if fa and fb:
        if fa.get("path") != fb.get("path"):
            return f"${name} names another file ({fa.get('path')} then, {fb.get('path')} now)"
        if fa == fb:
            return None
    elif a.get("value") != b.get("value"):
        return f"${name} differs ({a.get('value') or 'unset'} then, {b.get('value') or 'unset'} now)"
    elif fa == fb:
        return None
    return (f"the file ${name} names changed ({a.get('value')}: {describe_stamp(fa)} then, "
            f"{describe_stamp(fb)} now)")


def _vars(overrides: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(dict(overrides or {}).items())) or "none"


def _dir(build: Mapping[str, Any] | None) -> str:
    return str(build.get("dir")) if build else "no build"


def _short(commit: Any) -> str:
    return str(commit)[:12] if commit else "no commit"


def _machine_text(machine: Any) -> str:
    if not machine:
        return "unknown"
    gpus = ", ".join(f"{name} ({cc})" if cc else str(name) for name, cc in machine.get("gpus") or ()) or "no GPU"
    return f"{gpus}, driver {machine.get('driver') or '?'}"
