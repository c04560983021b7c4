"""Re-check the steps ninja's dry run calls dirty only because an always-run command feeds them.

Once one input of an edge is dirty, ninja marks the edge dirty and never looks
at its own output: `-d explain` then says only "<byproduct> is dirty". An
object that includes both an always-run command's byproduct (the fork's
``ui.h``) and a header the user edited would hide the edit behind that line.
So before a build whose only explained causes are always-run commands is called
current, every step downstream of them is checked the way ninja would check it
if the command had left its byproducts alone (it copies only if different):
its output must exist and be no older than any of its inputs, explicit,
implicit or recorded in ``.ninja_deps`` (order-only inputs do not count, as in
ninja). The graph comes from ninja itself (`-t query`, `-t deps`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvdiag.proc.runner import CommandNotFound, run_command

RECHECK_TIMEOUT_S = 60.0
MAX_RECHECKED = 2000  # nodes; more than that behind always-run commands is left unknown


@dataclass(frozen=True)
class Recheck:
    """``causes`` found among ``checked`` steps; ``problem`` when the check could not be made."""

    checked: int
    causes: tuple[str, ...]
    problem: str | None = None


def _ninja_tool(build_dir: Path, tool: str, nodes: Sequence[str], log_dir: Path, ninja: str):
    result = run_command([ninja, "-C", str(build_dir), "-t", tool, *nodes], timeout=RECHECK_TIMEOUT_S,
                         log_dir=log_dir, name=f"staleness-ninja-{tool}", env_overrides={"LC_ALL": "C"})
    if result.timed_out or result.returncode != 0:
        return None, f"ninja -t {tool} failed: {result.describe()}"
    return result.stdout_text(), None


def _query_inputs(text: str) -> dict[str, tuple[str, list[str]]]:
    """`ninja -t query` -> {node: (rule, non-order-only inputs)}."""
    out: dict[str, tuple[str, list[str]]] = {}
    node, rule, inputs, in_inputs = None, "", [], False
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            if node is not None:
                out[node] = (rule, inputs)
            node, rule, inputs, in_inputs = line[:-1], "", [], False
        elif line.startswith("  input: "):
            rule, in_inputs = line[len("  input: "):].strip(), True
        elif line.startswith("  ") and not line.startswith("    "):
            in_inputs = False  # "outputs:", "validations:"
        elif in_inputs and line.startswith("    "):
            item = line.strip()
            if item.startswith(("||", "|@")):
                continue
            inputs.append(item[1:].strip() if item.startswith("|") else item)
    if node is not None:
        out[node] = (rule, inputs)
    return out


def _deps(text: str) -> dict[str, list[str]]:
    """`ninja -t deps` -> {output: recorded dependencies}."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and ": #deps " in line:
            current = line.split(": #deps ", 1)[0]
            out[current] = []
        elif current is not None and line.startswith("    ") and line.strip():
            out[current].append(line.strip())
        elif not line.strip():
            current = None
    return out


def _mtime(build_dir: Path, path: str) -> int | None:
    try:
        return (Path(path) if Path(path).is_absolute() else build_dir / path).stat().st_mtime_ns
    except OSError:
        return None


def recheck_behind(build_dir: Path, dirty_nodes: Iterable[str], always_outputs: set[str],
                   log_dir: Path, ninja: str = "ninja") -> Recheck:
    """Would any step behind the always-run commands run for a reason of its own?"""
    nodes = sorted(set(dirty_nodes) - always_outputs)
    if not nodes:
        return Recheck(0, ())
    if len(nodes) > MAX_RECHECKED:
        return Recheck(0, (), f"{len(nodes)} steps behind always-run commands: too many to re-check")
    try:
        query_text, problem = _ninja_tool(build_dir, "query", nodes, log_dir, ninja)
        if problem:
            return Recheck(0, (), problem)
        graph = _query_inputs(query_text)
        built = [n for n in nodes if n in graph and graph[n][0] != "phony"]
        deps_text, problem = _ninja_tool(build_dir, "deps", built, log_dir, ninja) if built else ("", None)
    except CommandNotFound as exc:
        return Recheck(0, (), f"ninja not found: {exc}")
    if problem:
        return Recheck(0, (), problem)
    deps = _deps(deps_text)
    causes = []
    for node in built:
        own = _mtime(build_dir, node)
        if own is None:
            causes.append(f"output {node} doesn't exist (behind an always-run command)")
            continue
        newest, newest_path = None, None
        for item in [*graph[node][1], *deps.get(node, [])]:
            mtime = _mtime(build_dir, item)
            if mtime is not None and (newest is None or mtime > newest):
                newest, newest_path = mtime, item
        if newest is not None and newest > own:
            causes.append(f"output {node} older than most recent input {newest_path} "
                          f"(re-checked: ninja named only an always-run command's byproduct)")
    return Recheck(len(built), tuple(causes))
