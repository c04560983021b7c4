"""The registry linter: every problem of every file, reported at once.

Works on the raw TOML, section by section against `schema.SECTIONS`, then checks
what the schema alone cannot say: regexes compile, templates use only known
variables, referenced steps and probe files exist, ids are unique and match
their file names.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path
from typing import Any, Iterable

import jinja2
from jinja2 import meta

from kvdiag import resources
from kvdiag.registry import schema
from kvdiag.registry.radius import MAX_RADIUS_ITEMS, RADIUS_LISTS
from kvdiag.registry.raw import Problem, RawEntry
from kvdiag.registry.sandbox import SANDBOX, forbidden_reaches

ID_PATTERN = re.compile(r"^D[1-9][0-9]*$")

# Which signature keys belong to which matcher type.
MATCHER_KEYS = {
    "sanitizer": {"tool", "kind", "site", "kernel", "min_count"},
    "abort": {"kind", "message", "backtrace"},
    "case": {"params", "status", "metric", "min_value", "min_count"},
    "output": {"pattern", "stream"},
    "exit": {"signal", "code"},
    "stale": set(),
    "relative": {"pattern", "stream", "arm", "ratio_min", "difference_min", "unit", "pick"},
}
COMMON_MATCHER_KEYS = {"type", "step"}



def lint_raw(raw: RawEntry) -> list[Problem]:
    """Every schema and consistency problem of one file."""
    name = raw.path.name
    problems: list[Problem] = []
    add = lambda key, msg: problems.append(Problem(name, key, msg))  # noqa: E731
    for section in raw.data:
        if section not in schema.SECTIONS:
            add(section, f"unknown section (known: {', '.join(schema.SECTIONS)})")
    for section_name, section in schema.SECTIONS.items():
        value = raw.data.get(section_name)
        if value is None:
            if section.required:
                add(section_name, "required section is missing")
            continue
        tables = value if section.many else [value]
        if section.many and not isinstance(value, list):
            add(section_name, f"must be an array of tables ([[{section_name}]])")
            continue
        if not section.many and not isinstance(value, dict):
            add(section_name, f"must be a table ([{section_name}])")
            continue
        for i, table in enumerate(tables):
            where = f"{section_name}[{i}]" if section.many else section_name
            if not isinstance(table, dict):
                add(where, "must be a table")
                continue
            _lint_table(table, section, where, add)
    if not problems:
        _lint_consistency(raw, add)
    return problems


def _lint_table(table: dict[str, Any], section: schema.Section, where: str, add) -> None:
    for key in table:
        if key not in section.keys:
            add(f"{where}.{key}", f"invalid key (known: {', '.join(section.keys)})")
    for key, spec in section.keys.items():
        if key not in table:
            if spec.required:
                add(f"{where}.{key}", "required key is missing")
            continue
        message = _check_value(table[key], spec)
        if message:
            add(f"{where}.{key}", message)


def _check_value(value: Any, spec: schema.Key) -> str | None:
    kind = spec.type
    if kind == "str":
        if not isinstance(value, str):
            return "must be a string"
        if spec.enum and value not in spec.enum:
            return f"{value!r} is not one of {', '.join(spec.enum)}"
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return "must be a non-negative integer"
    elif kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return "must be a number"
        if not math.isfinite(value):                # TOML has nan and inf
            return f"must be a finite number, not {value}"
    elif kind == "bool":
        if not isinstance(value, bool):
            return "must be true or false"
    elif kind == "date":
        if isinstance(value, dt.datetime):
            return "must be a date, YYYY-MM-DD (not a date and time)"
        if isinstance(value, dt.date):
            return None
        try:
            dt.date.fromisoformat(str(value))
        except ValueError:
            return "must be a date, YYYY-MM-DD"
    elif kind == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be an array of strings"
        bad = [v for v in value if spec.enum and v not in spec.enum]
        if bad:
            return f"{', '.join(map(repr, bad))} not in {', '.join(spec.enum)}"
    elif kind == "commits":
        if isinstance(value, str):
            return None
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            return "must be a commit id or a non-empty array of commit ids"
    elif kind == "regex":
        return _check_regex(value)
    elif kind == "regexes":
        if isinstance(value, list):
            if not value:
                return "must be a regex or a non-empty array of regexes"
            return next((msg for msg in map(_check_regex, value) if msg), None)
        return _check_regex(value)
    elif kind == "argv":
        return _check_argv(value)
    elif kind == "argv-list":
        if not isinstance(value, list) or not value:
            return "must be a non-empty array of argv arrays"
        for argv in value:
            msg = _check_argv(argv)
            if msg:
                return msg
    elif kind == "table":
        if not isinstance(value, dict):
            return "must be a table"
    elif kind == "list[table]":
        return _check_sites(value)
    elif kind == "source-facts":
        return _check_source_facts(value)
    return None


FACT_KEYS = ("files", "pattern", "says")


def _check_source_facts(value: Any) -> str | None:
    """`applies.source_facts`: each {files: non-empty array of paths, pattern: a regex, says: what it shows}."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return "must be a non-empty array of tables {files, pattern, says} ([[applies.source_facts]])"
    for i, fact in enumerate(value):
        unknown = sorted(set(fact) - set(FACT_KEYS))
        if unknown:
            return f"[{i}]: unknown key(s) {', '.join(unknown)} (known: {', '.join(FACT_KEYS)})"
        files = fact.get("files")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
            return f"[{i}].files must be a non-empty array of paths in the tree"
        if not isinstance(fact.get("says"), str) or not fact["says"].strip():
            return f"[{i}].says must say, in words, what the pattern shows the tree has"
        problem = _check_regex(fact.get("pattern"))
        if problem:
            return f"[{i}].pattern {problem}"
    return None


SITE_KEYS = {"file": str, "holds": str, "anchor": str, "at": dict, "line": int, "commit": str}
SITE_REQUIRED = ("file", "holds")


def _check_sites(value: Any) -> str | None:
    """`location.sites`: each {file, holds} with an optional `anchor` and `at` record (the older
    `line` + `commit` still read as one record), so `registry verify` can find it again."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return "must be an array of tables {file, holds, anchor, at} ([[location.sites]])"
    for i, site in enumerate(value):
        unknown = sorted(set(site) - set(SITE_KEYS))
        if unknown:
            return f"[{i}]: invalid key {', '.join(unknown)} (known: {', '.join(SITE_KEYS)})"
        missing = [key for key in SITE_REQUIRED if key not in site]
        if missing:
            return f"[{i}]: required key {missing[0]} is missing"
        for key, typ in SITE_KEYS.items():
            if key in site and (not isinstance(site[key], typ) or isinstance(site[key], bool)):
                kind = {int: "an integer", dict: "a table of commit = line"}.get(typ, "a string")
                return f"[{i}].{key}: must be {kind}"
        for key in ("holds", "anchor"):
            if key in site and not site[key].strip():
                return f"[{i}].{key}: must name the text the line holds"
        bad = [c for c, line in site.get("at", {}).items()
               if not isinstance(line, int) or isinstance(line, bool) or line < 1]
        if bad:
            return f"[{i}].at.{bad[0]}: must be a line number (1 or more)"
    return None


def _check_regex(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string (a regular expression)"
    try:
        re.compile(value)
    except re.error as exc:
        return f"malformed regex: {exc}"
    return None


def _check_argv(value: Any) -> str | None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return "must be a non-empty array of strings (one argument each; no shell strings)"
    return None


def template_variables(template: str) -> set[str]:
    """Undeclared top-level names a jinja2 template reads; raises on syntax errors."""
    return meta.find_undeclared_variables(SANDBOX.parse(template))


def _lint_consistency(raw: RawEntry, add) -> None:
    data = raw.data
    defect = data["defect"]
    if not ID_PATTERN.match(defect["id"]):
        add("defect.id", f"{defect['id']!r} is not of the form D<number>")
    elif raw.path.stem != defect["id"]:
        add("defect.id", f"{defect['id']!r} does not match the file name {raw.path.name}")
    _lint_osv(data, add)
    _lint_ranges(data, add)
    steps = data.get("repro", [])
    step_names = [s["name"] for s in steps]
    for dup in {n for n in step_names if step_names.count(n) > 1}:
        add("repro", f"step name {dup!r} is used twice")
    binaries = set(data.get("requires", {}).get("binaries", []))
    for i, step in enumerate(steps):
        step_binaries = set(step["requires_binaries"]) if "requires_binaries" in step else binaries
        _lint_step(step, f"repro[{i}]", step_binaries, add)
    for i, matcher in enumerate(data.get("signature", [])):
        _lint_matcher(matcher, f"signature[{i}]", step_names, add)
        if matcher["type"] == "relative":
            _lint_relative(matcher, f"signature[{i}]", {s["name"]: s for s in steps}, data.get("scan"), add)
    signed = {m.get("step") for m in data.get("signature", [])}
    for i, step in enumerate(steps):
        arm = step.get("compare_with")
        if arm is None:
            continue
        if arm not in step_names or arm == step["name"]:
            add(f"repro[{i}].compare_with", f"no other repro step named {arm!r}")
        elif None in signed or arm in signed:
            add(f"repro[{i}].compare_with", f"step {arm!r} has a signature: a comparison arm is measured, not judged")
    scan = data.get("scan")
    if scan and scan["step"] not in step_names:
        add("scan.step", f"no repro step named {scan['step']!r}")
    probe_names = [p["name"] for p in data.get("probes", [])]
    for i, table in enumerate(data.get("radius", [])):
        _lint_radius(table, f"radius[{i}]", add)
    for i, probe in enumerate(data.get("probes", [])):
        if not resources.data_path(probe["file"]).is_file():
            add(f"probes[{i}].file", f"dangling: {probe['file']} does not exist")
    for i, step in enumerate(steps):
        named = step.get("exercise_probe")
        if named is not None and named not in probe_names:
            add(f"repro[{i}].exercise_probe", f"no [[probes]] table of this entry is named {named!r}")
        if named is not None and step["kind"] != "backend-ops":
            add(f"repro[{i}].exercise_probe", "only backend-ops steps count cases")
    if not raw.body.strip():
        add("(body)", "the Markdown body is empty: root cause, trigger, what is established")


_COMMIT = re.compile(r"^[0-9a-fA-F]{7,40}$")
_CAST = re.compile(r"\((?:bool|int|unsigned int|long)\)")


def _lint_radius(table: dict[str, Any], where: str, add) -> None:
    """A measured radius names what it measured: a commit, and kernels or instantiations in the
    canonical spelling (kvdiag.parse.launches) that launch lines and symbol listings compare with."""
    if not _COMMIT.match(str(table["commit"])):
        add(f"{where}.commit", f"{table['commit']!r} is not a commit id (7 to 40 hex digits)")
    if not table.get("kernels") and not table.get("instantiations"):
        add(where, "names neither kernels nor instantiations: nothing was measured")
    for key in RADIUS_LISTS:
        if len(table.get(key) or ()) > MAX_RADIUS_ITEMS:
            add(f"{where}.{key}", f"{len(table[key])} items, more than {MAX_RADIUS_ITEMS}: write it with `kvdiag "
                                  "registry radius`, which folds the rest and says so")
    for key in ("kernels", "instantiations", "clean_kernels"):
        for name in table.get(key) or ():
            if _CAST.search(name) or "<" in name and not name.endswith(">"):
                add(f"{where}.{key}", f"{name!r} is not canonical (name<args>, no casts, no parameter list): "
                                      "write it as `kvdiag registry radius` does")


def _lint_osv(data: dict[str, Any], add) -> None:
    """The rules `kvdiag registry export` relies on: aliases are advisory ids, reference types OSV's."""
    from kvdiag.registry.osv import REFERENCE_TYPES, alias_problem, reference_type

    for i, alias in enumerate(data["defect"].get("aliases", [])):
        problem = alias_problem(alias)
        if problem:
            add(f"defect.aliases[{i}]", problem)
    for i, ref in enumerate(data.get("references", [])):
        if isinstance(ref, dict) and reference_type(str(ref.get("type"))) not in REFERENCE_TYPES:
            add(f"references[{i}].type", f"{ref.get('type')!r} is not an OSV reference type "
                                         f"({', '.join(REFERENCE_TYPES)}, or SEED)")


def _lint_ranges(data: dict[str, Any], add) -> None:
    """Each ``[[affected]]`` range: a known repository, full commit ids, OSV's rules on events."""
    from kvdiag.registry.ranges import range_problems

    for i, table in enumerate(data.get("affected", [])):
        for key, message in range_problems(table):
            add(f"affected[{i}].{key}", message)


def _lint_step(step: dict[str, Any], where: str, binaries: set[str], add) -> None:
    has_argv, has_commands = "argv" in step, "commands" in step
    if step["kind"] in ("backend-ops", "command", "server") and has_argv == has_commands:
        add(where, "needs exactly one of argv or commands")
    if step["kind"] in ("build-check", "compile") and (has_argv or has_commands):
        add(where, f"a {step['kind']} step runs no command of its own")
    if step["kind"] == "compile" and not step.get("sources"):
        add(where, "a compile step needs sources (the translation units to build)")
    for key in ("cmake_defines", "sources", "cmake_options"):
        if key in step and step["kind"] != "compile":
            add(f"{where}.{key}", "only compile steps configure a scratch build")
    for name, value in step.get("cmake_defines", {}).items():
        if not isinstance(value, str):
            add(f"{where}.cmake_defines.{name}", "must be a string, as on a cmake -D command line")
    for key in ("timeout", "expected_seconds"):
        if isinstance(step.get(key), (int, float)) and not step[key] > 0:
            add(f"{where}.{key}", f"a time must be above 0 seconds (got {step[key]})")
    if step["kind"] != "backend-ops" and "min_cases" in step:
        add(f"{where}.min_cases", "only backend-ops steps count cases")
    if step["kind"] != "backend-ops" and "absent_when_unlisted" in step:
        add(f"{where}.absent_when_unlisted", "only backend-ops steps list cases")
    if "sanitizer_options" in step and "sanitizer" not in step:
        add(f"{where}.sanitizer_options", "given without a sanitizer")
    known = set(schema.TEMPLATE_GLOBALS) | set(step.get("vars", {}))
    templates = [("argv", a) for a in step.get("argv", [])]
    templates += [("commands", a) for c in step.get("commands", []) for a in c]
    templates += [(f"env.{k}", v) for k, v in step.get("env", {}).items() if isinstance(v, str)]
    for key, template in templates:
        try:
            names = template_variables(template)
        except jinja2.TemplateSyntaxError as exc:
            add(f"{where}.{key}", f"template {template!r} does not parse: {exc.message}")
            continue
        for reach in forbidden_reaches(template):
            add(f"{where}.{key}", f"template {template!r} reaches for {reach}, which the sandbox forbids "
                                  f"(templates only substitute values)")
        for undefined in sorted(names - known):
            add(f"{where}.{key}", f"template {template!r} uses undefined variable {undefined!r}")
        for used in re.findall(r"bin\[['\"]([^'\"]+)['\"]\]", template):
            if used not in binaries:
                add(f"{where}.{key}", f"uses bin[{used!r}] but requires.binaries (or the step's "
                                      f"requires_binaries) does not list it")
    params = step.get("vars", {}).get("params")
    if isinstance(params, str):
        message = _check_regex(params)
        if message:
            add(f"{where}.vars.params", message)


def _lint_matcher(matcher: dict[str, Any], where: str, step_names: list[str], add) -> None:
    allowed = MATCHER_KEYS[matcher["type"]] | COMMON_MATCHER_KEYS
    for key in matcher:
        if key not in allowed:
            add(f"{where}.{key}", f"not a key of a {matcher['type']!r} matcher")
    if "step" in matcher and matcher["step"] not in step_names:
        add(f"{where}.step", f"no repro step named {matcher['step']!r}")
    if matcher["type"] == "sanitizer" and matcher.get("kind") and matcher["kind"] not in schema.FINDING_KINDS:
        add(f"{where}.kind", f"{matcher['kind']!r} is not one of {', '.join(schema.FINDING_KINDS)}")
    if matcher["type"] == "abort" and matcher.get("kind") and matcher["kind"] not in schema.ABORT_KINDS:
        add(f"{where}.kind", f"{matcher['kind']!r} is not one of {', '.join(schema.ABORT_KINDS)}")
    if matcher["type"] == "output" and "pattern" not in matcher:
        add(where, "an output matcher needs a pattern")
    if matcher["type"] == "exit" and ("signal" in matcher) == ("code" in matcher):
        add(where, "an exit matcher needs exactly one of signal or code")


def files_by_id(raws: Iterable[RawEntry]) -> dict[str, list[Path]]:
    """Every id the files claim (``defect.id``), with the files that claim it, in load order."""
    claimed: dict[str, list[Path]] = {}
    for raw in raws:
        entry_id = _defect(raw).get("id")
        if isinstance(entry_id, str):
            claimed.setdefault(entry_id, []).append(raw.path)
    return claimed


def _lint_relative(matcher: dict[str, Any], where: str, steps: dict[str, dict[str, Any]],
                   scan: dict[str, Any] | None, add) -> None:
    """A relative matcher compares a figure of its step with the same figure of that step's
    comparison arm: the step, the arm, the captured number and a usable threshold must all exist."""
    step = steps.get(matcher.get("step", ""))
    if "step" not in matcher:
        add(where, "a relative matcher needs the step it judges (`step`)")
    elif step is not None:
        if step["kind"] not in ("backend-ops", "command", "server"):
            add(f"{where}.step", f"a {step['kind']} step runs no comparison arm")
        if scan and scan.get("step") == step["name"]:
            add(f"{where}.step", "the scan step judges each case alone, without a comparison arm")
        if matcher.get("arm") in steps and step.get("compare_with") != matcher["arm"]:
            add(f"{where}.arm", f"step {step['name']!r} compares with "
                                f"{step.get('compare_with')!r}, not {matcher['arm']!r} (`compare_with` runs the arm)")
    if "arm" not in matcher:
        add(where, "a relative matcher needs `arm`, the comparison arm's step")
    elif matcher["arm"] not in steps:
        add(f"{where}.arm", f"no repro step named {matcher['arm']!r}")
    pattern = matcher.get("pattern")
    if pattern is None:
        add(where, "a relative matcher needs a pattern with a named group `value` (the number)")
    elif _check_regex(pattern) is None and "value" not in re.compile(pattern).groupindex:
        add(f"{where}.pattern", "has no named group `value`: write the number as (?P<value>...)")
    thresholds = [k for k in ("ratio_min", "difference_min") if k in matcher]
    if len(thresholds) != 1:
        add(where, "a relative matcher needs exactly one of ratio_min or difference_min")
    for key in thresholds:     # the schema's float check already refused what is not a finite number
        if matcher[key] <= 0:
            add(f"{where}.{key}", f"must be a finite positive number, not {matcher[key]!r}")


def lint_registry_wide(raws: Iterable[RawEntry]) -> list[Problem]:
    """Problems that involve several files: duplicate ids, dangling related ids."""
    problems: list[Problem] = []
    raws = list(raws)
    seen = files_by_id(raws)
    for entry_id, files in seen.items():
        problems += [Problem(f.name, "defect.id", f"duplicate id {entry_id!r} (also {files[0].name})")
                     for f in files[1:]]
    for raw in raws:
        related = _defect(raw).get("related", [])
        for rel in related if isinstance(related, list) else []:
            if rel not in seen:
                problems.append(Problem(raw.path.name, "defect.related", f"unknown id {rel!r}"))
    return problems


def _defect(raw: RawEntry) -> dict:
    defect = raw.data.get("defect")
    return defect if isinstance(defect, dict) else {}
