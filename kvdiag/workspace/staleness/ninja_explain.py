"""Why would ninja rebuild? Sorting `ninja -d explain` root causes into source staleness and always-run commands.

A dry run cannot know what a ``restat`` command will do, so it lists everything
downstream of it. CMake's ``add_custom_target`` (llama.cpp's "Provisioning UI
assets") is such a command: its declared output is a name no command ever
creates, so ninja runs it on every build, and ``ninja -n`` on a build made a
second ago lists it and every object and link behind it. Those steps say
nothing about the build's currency with its sources. What does say something
is the explanation ninja gives for each edge it found dirty at the root:
"output X older than most recent input Y" is a source newer than its object;
"output X doesn't exist" for a restat edge that ``.ninja_log`` says already
ran is a command that never creates its output. Anything not recognised as
always-run counts as staleness: an unknown reason must not hide a stale build.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EXPLAIN_PREFIX = "ninja explain: "
_PROPAGATED = re.compile(r" is dirty$")
_MISSING = re.compile(r"^output (?P<out>.+) doesn't exist$")
_PHONY_FORCE = re.compile(r"^output (?P<out>.+) of phony edge with no inputs doesn't exist$")


@dataclass(frozen=True)
class DirtyCause:
    """One root explanation ninja gave; ``always_run`` ones are not staleness against the sources."""

    line: str  # ninja's words, without its "ninja explain: " prefix
    always_run: bool = False
    step: str | None = None  # the edge's description, where the manifest names it
    why: str = ""  # for an always-run cause: the evidence that it runs on every build
    outputs: tuple[str, ...] = ()  # for an always-run cause: everything its edge writes

    def describe(self) -> str:
        if not self.always_run:
            return self.line
        return f"{self.step or 'a command'}: {self.line}; {self.why}"


@dataclass(frozen=True)
class _Edge:
    outputs: tuple[str, ...]
    rule: str
    inputs: tuple[str, ...]
    bindings: dict[str, str]


def _explanations(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(EXPLAIN_PREFIX) and line[len(EXPLAIN_PREFIX):].strip():
            lines.append(line[len(EXPLAIN_PREFIX):].strip())
    return lines


def dirty_nodes(text: str) -> set[str]:
    """Nodes ninja called dirty as an input of something ("X is dirty")."""
    return {line[:-len(" is dirty")] for line in _explanations(text) if _PROPAGATED.search(line)}


def explained_causes(text: str) -> list[str]:
    """Root explanations only: "X is dirty" lines repeat a cause already printed for an input."""
    return [line for line in _explanations(text) if not _PROPAGATED.search(line)]


def classify_causes(text: str, build_dir: Path) -> list[DirtyCause]:
    """Each root cause of `ninja -n -d explain`, marked always-run where the manifest and log prove it."""
    lines = explained_causes(text)
    missing = {m.group("out") for m in map(_MISSING.match, lines) if m}
    dirty = dirty_nodes(text)
    edges, rules = _parse(build_dir, missing | dirty) if missing or dirty else ({}, {})
    logged = _logged_outputs(build_dir) if missing else set()
    out: list[DirtyCause] = []
    for line in lines:
        force = _PHONY_FORCE.match(line)
        if force:
            out.append(DirtyCause(line, True, None, _FORCE_WHY, (force.group("out"),)))
            continue
        m = _MISSING.match(line)
        edge = edges.get(m.group("out")) if m else None
        if m and edge is not None and _restat(edge, rules) and m.group("out") in logged:
            step = _description(edge, rules)
            out.append(DirtyCause(line, True, step, "a restat command that .ninja_log records as run "
                                                    "and that never creates this output runs on every build "
                                                    "(CMake's add_custom_target)", edge.outputs))
            continue
        out.append(DirtyCause(line))
    # ninja 1.13 prints no reason for an input-less phony edge, only that its output "is dirty"
    said = " ".join(lines)
    for node in sorted(dirty):
        edge = edges.get(node)
        if edge is not None and edge.rule == "phony" and not edge.inputs and f"output {node} " not in said:
            out.append(DirtyCause(f"output {node} of phony edge with no inputs doesn't exist", True, None,
                                  _FORCE_WHY, (node,)))
    return out


_FORCE_WHY = "a phony edge with no inputs is always dirty: whatever depends on it runs on every build"


# --------------------------------------------------------------------------- the manifest, just enough of it

_TOP_VARIABLE = re.compile(r"^(?P<key>[A-Za-z0-9_.-]+)\s*=\s*(?P<value>.*)$")
_VARIABLE_REF = re.compile(r"\$\{(?P<a>[A-Za-z0-9_.-]+)\}|\$(?P<b>[A-Za-z0-9_-]+)")
_BINDING = re.compile(r"^\s+(?P<key>[A-Za-z0-9_.-]+)\s*=\s*(?P<value>.*)$")
MAX_MANIFEST_FILES = 64  # build.ninja and what it includes


def _logical_lines(path: Path) -> Iterator[str]:
    """Lines of a ninja file with `$`-newline continuations joined."""
    pending = ""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if line.endswith("$") and not line.endswith("$$"):
                pending += line[:-1]
                continue
            yield pending + line
            pending = ""
    if pending:
        yield pending


def _split_paths(text: str) -> list[str]:
    """Unescaped paths of a build line's output or input list (`$ `, `$:`, `$$`)."""
    paths, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            cur += text[i + 1] if text[i + 1] in " :$" else c + text[i + 1]
            i += 2
            continue
        if c == " ":
            if cur:
                paths.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        paths.append(cur)
    return paths


def _expand(text: str, variables: dict[str, str]) -> str:
    """`$name` and `${name}` of the manifest's top-level variables (CMake's ${cmake_ninja_workdir})."""
    def sub(m: re.Match) -> str:
        name = m.group("a") or m.group("b")
        return variables.get(name, m.group(0))
    return _VARIABLE_REF.sub(sub, text.replace("$$", "\0")).replace("\0", "$$")


def _unescaped_colon(line: str) -> int:
    i = 0
    while i < len(line):
        if line[i] == "$":
            i += 2
            continue
        if line[i] == ":":
            return i
        i += 1
    return -1


def _manifest_files(build_dir: Path) -> Iterator[Path]:
    seen: set[Path] = set()
    todo = [build_dir / "build.ninja"]
    while todo and len(seen) < MAX_MANIFEST_FILES:
        path = todo.pop(0)
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        yield path
        for line in _logical_lines(path):
            if line.startswith(("include ", "subninja ")):
                todo.append(build_dir / line.split(None, 1)[1].strip())


def _parse(build_dir: Path, wanted: set[str] | None) -> tuple[dict[str, _Edge], dict[str, dict[str, str]]]:
    """Edges producing the `wanted` outputs (all when None) and every rule's bindings."""
    edges: dict[str, _Edge] = {}
    rules: dict[str, dict[str, str]] = {}
    variables: dict[str, str] = {}
    for path in _manifest_files(build_dir):
        current: dict[str, str] | None = None
        for line in _logical_lines(path):
            binding = _BINDING.match(line)
            if binding and current is not None:
                current[binding.group("key")] = binding.group("value").strip()
                continue
            current = None
            top = _TOP_VARIABLE.match(line)
            if top:
                variables[top.group("key")] = _expand(top.group("value").strip(), variables)
            elif line.startswith("rule "):
                current = rules.setdefault(line[5:].strip(), {})
            elif line.startswith("build "):
                line = _expand(line, variables)
                colon = _unescaped_colon(line)
                if colon < 0:
                    continue
                outputs = _split_paths(line[6:colon].replace(" | ", " ").replace("|", " "))
                hits = [o for o in outputs if wanted is None or o in wanted]
                if not hits:
                    continue
                rest = _split_paths(line[colon + 1:])
                inputs = tuple(p for p in rest[1:] if p not in ("|", "||", "|@"))
                edge = _Edge(tuple(outputs), rest[0] if rest else "", inputs, {})
                current = edge.bindings
                for o in hits:
                    edges[o] = edge
    return edges, rules


def _description(edge: _Edge, rules: dict[str, dict[str, str]]) -> str | None:
    """The step's name as ninja prints it: the edge's or its rule's description ($DESC, $out filled in)."""
    text = edge.bindings.get("description") or rules.get(edge.rule, {}).get("description")
    if not text:
        return edge.bindings.get("DESC")
    values = {**edge.bindings, "out": " ".join(edge.outputs)}
    return _VARIABLE_REF.sub(lambda m: values.get(m.group("a") or m.group("b"), ""), text) or None


def _restat(edge: _Edge, rules: dict[str, dict[str, str]]) -> bool:
    """ninja's GetBindingBool: a non-empty `restat` on the edge or, failing that, on its rule.
    A value that is a variable reference is not resolved: not proven, so not restat."""
    value = edge.bindings.get("restat")
    if value is None:
        value = rules.get(edge.rule, {}).get("restat")
    return bool(value) and "$" not in value


def _logged_outputs(build_dir: Path) -> set[str]:
    """Outputs .ninja_log records as built: proof that their command has already run."""
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return set()
    outputs = set()
    with log.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 5:
                outputs.add(fields[3])
    return outputs
