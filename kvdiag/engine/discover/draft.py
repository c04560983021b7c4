"""A registry entry drafted from a new root: data a person finishes, that lints and confirms as drafted.

What discovery knows goes in as data: where (the site, found again in other trees by its
context anchor, as `registry verify` reads it), how to reach it (the root's smallest case
under its tool: the repro step), what confirms it (a signature of the root's tool, kind, site
file and function) and its scan space. What only a person can say is marked as such in the
file: the title's wording, the severity, the references, and the ``[[affected]]`` ranges,
which come from `kvdiag bisect` or the history. The entry's status is ``draft``.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kvdiag.engine.discover.findings import ABORT
from kvdiag.engine.verdict.planning import escape_params
from kvdiag.parse.sanitizer import HOST_API_KIND
from kvdiag.workspace.sites import FOUND, SiteSpec, locate

DRAFT_STATUS = "draft"
SITE_LINE = r":\d+"
API_CHECKING_TOOLS = ("memcheck", "initcheck")     # the tools that check the host API's copies
ANCHOR_LOOKBACK = 400      # lines above the site searched for a line that leads to it alone
_FUNCTION_HEAD = re.compile(r"(__global__|__device__|static|template|void|inline)\b.*\(")


@dataclass(frozen=True)
class DraftContext:
    """What a draft names besides its root: the tree it was found on and the run that found it."""

    entry_id: str
    commit: str | None                   # the tree's commit, when known
    tree: str                            # how the tree is named in the text (a repo label, a folder name)
    run: str | None                      # the discovery run
    today: str = ""


def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escaping is TOML's for these characters)."""
    return json.dumps(text, ensure_ascii=False)


def toml_literal(regex: str) -> str:
    """A regex as a TOML literal string where it can be one (no quote, no newline), else basic."""
    return f"'{regex}'" if "'" not in regex and "\n" not in regex else toml_string(regex)


def choose_anchor(path: str, text: str, line: int) -> tuple[str, str | None] | None:
    """(holds, anchor) that lead to ``line`` of ``text`` and to no other: the site's own text, and the
    nearest line above it that makes it unique (a function's head first: it moves least between
    trees). None when the line is blank or no anchor singles it out."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines) or not lines[line - 1].strip():
        return None
    holds = lines[line - 1].strip()
    alone = locate(SiteSpec(file=path, holds=holds), text)
    first = max(0, line - 1 - ANCHOR_LOOKBACK)
    above = [lines[i].strip() for i in range(line - 2, first - 1, -1) if lines[i].strip()]
    candidates = [c for c in above if _FUNCTION_HEAD.search(c)] + above
    for anchor in candidates:
        if anchor.startswith(("//", "/*", "*")) or anchor in ("{", "}"):
            continue
        found = locate(SiteSpec(file=path, holds=holds, anchor=anchor), text)
        if found.state == FOUND and found.line == line:
            return holds, anchor
    if alone.state == FOUND and alone.line == line:
        return holds, None
    return None


def render_draft(root: Mapping[str, Any], ctx: DraftContext, source_text: str | None) -> str:
    """The draft entry file for one new root (a root as ``Root.to_dict`` gives it)."""
    today = ctx.today or _dt.date.today().isoformat()
    kind, function = root["kind"], root["function"]
    tool = run_tool(root)
    smallest = root["smallest"] or {}
    op, params = smallest.get("op", ""), smallest.get("params", "")
    host_api = kind == HOST_API_KIND      # a host API call's record: no kernel, no source line
    path = "" if host_api else (root.get("path") or (root.get("example") or {}).get("file")
                                or root["site"].rsplit(":", 1)[0])
    line = None if host_api else root.get("line")
    abort = kind.startswith(ABORT)
    ops = sorted(root.get("ops") or {op: 1})
    where = function if host_api else path.rsplit("/", 1)[-1] + (f":{line}" if line else "")
    title = f"{tool} {kind}" + (f" in {function}" if function != "?" and not host_api else "") + f" at {where}"
    summary = (f"kvdiag discover found {kind} under compute-sanitizer {tool} at {root['site']} in {function}, "
               f"in {root['cases']} case(s) of {', '.join(ops)}; the smallest is {op}({params}).")
    out = ["```toml",
           "# Drafted by `kvdiag discover`: every value below comes from the run named in `source`. A person",
           "# finishes it: the title's wording, the severity, the references, and the [[affected]] ranges",
           "# (from `kvdiag bisect` or the history); then the status leaves \"draft\".",
           "[defect]",
           f"id = {toml_string(ctx.entry_id)}",
           f"title = {toml_string(title)}                    # human: reword",
           f"summary = {toml_string(summary)}",
           'owner = "upstream"                 # human: upstream | fork | ...',
           f'status = "{DRAFT_STATUS}"',
           'severity = "medium"                # human: set',
           f'reported = "{today}"',
           f'modified = "{today}"',
           f"source = {toml_string(_source(ctx))}",
           "",
           "# human: add [[references]] (REPORT, FIX) and [[affected]] ranges once known.",
           "",
           "[location]",
           f"component = {toml_string(_component(path) if path else 'test-backend-ops (host API)')}",
           f"files = [{toml_string(path) if path else ''}]",
           f"functions = [{toml_string(function)}]",
           f"lines = {toml_string('none (a host API call, not a kernel)' if host_api else _lines(line, ctx))}"]
    if ctx.commit:
        out.append(f"commit = {toml_string(ctx.commit)}")
    site = choose_anchor(path, source_text, line) if source_text and line else None
    if site is not None:
        holds, anchor = site
        out += ["", "[[location.sites]]", f"file = {toml_string(path)}"]
        if anchor:
            out.append(f"anchor = {toml_string(anchor)}")
        out.append(f"holds = {toml_string(holds)}")
        if ctx.commit:
            out.append(f"at = {{ {ctx.commit[:12]} = {line} }}")
    out += ["", "[applies]", 'cmake_values = { GGML_CUDA = "ON" }',
            f"ops = [{', '.join(toml_string(o) for o in ops)}]",
            "", "[requires]", 'binaries = ["test-backend-ops"]', "gpu = true", "sanitizer = true", "lineinfo = true",
            "", "[[repro]]", 'name = "fast"', 'kind = "backend-ops"', "default = true",
            f"description = {toml_string(_repro_text(root, tool))}",
            'argv = ["{{ bin[\'test-backend-ops\'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", "-p", '
            '"{{ params }}"]',
            "timeout = 120",
            f'sanitizer = "{tool}"',
            f"sanitizer_options = [{', '.join(toml_string(o) for o in sanitizer_options(tool, root['kind']))}]",
            "print_limit = 100",
            f"evidence = [{', '.join(toml_string(e) for e in _evidence(abort))}]",
            f"vars = {{ op = {toml_string(op)}, params = {toml_literal('^' + escape_params(params) + '$')} }}",
            "", "[[signature]]"]
    out += _signature(root, path, abort)
    out += ["", "[scan]", 'step = "fast"', f"op = {toml_string(op)}", "params = '.'",
            "```", "", f"# {title}", "", _body(root, ctx)]
    return "\n".join(out) + "\n"


def sanitizer_options(tool: str, kind: str) -> tuple[str, ...]:
    """The repro's options: device frames, and for a kernel's memcheck or initcheck finding no check
    of the host API's copies.

    Discovery ran the case in the launch probe's GPU-only mode, where test-backend-ops copies
    nothing back; the repro runs its test mode, which reads back tensors the test may never have
    set. On an H100 (device session 21) GET_ROWS with type=i32 printed 1628 host API records
    (``Uninitialized access … on access by cudaMemcpy source``) ahead of the kernel's own, and the
    print limit kept the kernel's out of the log: the draft came out inconclusive on the build
    that found it. ``--check-api-memory-access no`` leaves the kernel's records as discovery saw them.
    """
    options = ("--show-backtrace", "device")
    if tool in API_CHECKING_TOOLS and not kind.startswith(ABORT) and kind != HOST_API_KIND:
        options += ("--check-api-memory-access", "no")
    return options


def run_tool(root: Mapping[str, Any]) -> str:
    """The tool the repro runs under: the root's own, or for an abort (seen under any tool) the first
    tool that saw it, under which it is known to happen."""
    if root["tool"] != "any":
        return root["tool"]
    return sorted(root.get("tools") or {"memcheck": 1})[0]


def _signature(root: Mapping[str, Any], path: str, abort: bool) -> list[str]:
    if abort:
        message = (root.get("example") or {}).get("message") or ""
        head = message.split("\n", 1)[0][:80]
        return ['type = "abort"', 'step = "fast"', f"kind = {toml_string(root['kind'][len(ABORT) + 1:])}",
                f"message = {toml_literal(re.escape(head).replace(chr(92) + ' ', ' '))}"]
    head = ['type = "sanitizer"', 'step = "fast"', f'tool = "{root["tool"]}"', f'kind = "{root["kind"]}"']
    if not path:        # a host API record: its kind is all a matcher can hold to
        return head + ["min_count = 1"]
    site = toml_literal(re.escape(path.rsplit("/", 1)[-1]) + SITE_LINE)
    kernel = toml_literal("^" + re.escape(root["function"]) + "(<|$)")   # racecheck prints the bare name, listings add <args>
    return head + [f"site = {site}", f"kernel = {kernel}", "min_count = 1"]


def _evidence(abort: bool) -> Sequence[str]:
    return ("abort", "running-case") if abort else ("sites", "instantiations", "error-count")


def _component(path: str) -> str:
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("ggml-"):
            return f"{part}/{parts[-1].split('.', 1)[0]}"
    return parts[-1].split(".", 1)[0]


def _lines(line: int | None, ctx: DraftContext) -> str:
    if line is None:
        return "unknown (the build lacked -lineinfo)"
    return f"{line} ({ctx.tree}{' ' + ctx.commit[:12] if ctx.commit else ''})"


def _source(ctx: DraftContext) -> str:
    where = f"{ctx.tree}" + (f" at {ctx.commit[:12]}" if ctx.commit else "")
    return f"kvdiag discover on {where}" + (f", run {ctx.run}" if ctx.run else "")


def _repro_text(root: Mapping[str, Any], tool: str) -> str:
    smallest = root["smallest"] or {}
    return (f"The root's smallest case, {smallest.get('op')}({smallest.get('params')}), alone under {tool}; "
            f"discovery saw the root in {root['cases']} case(s).")


def _body(root: Mapping[str, Any], ctx: DraftContext) -> str:
    kernels = ", ".join(root.get("kernels") or {}) or "not known"
    ops = ", ".join(f"{op} ({n})" for op, n in (root.get("ops") or {}).items())
    example = root.get("example") or {}
    lines = [
        "## What discovery saw",
        "",
        f"- **Tool and kind:** {root['tool']} {root['kind']}{' (racecheck warning)' if root.get('warning') else ''}.",
        f"- **Site:** `{root['site']}`" + (f": `{root['source_line']}`" if root.get("source_line") else "") + ".",
        f"- **Function:** `{root['function']}`; **kernels that launched it:** {kernels}.",
        *([f"- **The other side of the race:** {', '.join(root['peers'])}."] if root.get("peers") else []),
        f"- **Cases:** {root['cases']} ({ops}); **errors:** {root['errors']}; "
        f"**numeric test failed on:** {root.get('numeric_failed', 0)} of them"
        + (f" ({root['numeric_unchecked']} not tested)" if root.get("numeric_unchecked") else "") + ".",
        f"- **Smallest case:** `{(root.get('smallest') or {}).get('op')}({(root.get('smallest') or {}).get('params')})`.",
    ]
    if example.get("message"):
        lines.append(f"- **As printed:** {example['message']}.")
    lines += ["", "## For a person to finish", "",
              "- The root cause, in words, and whether it also corrupts results.",
              "- `[[affected]]` ranges: `kvdiag bisect` in both directions, or the history.",
              "- References: the upstream report and fix.",
              f"- Confirm with `kvdiag --registry <this folder> run {ctx.entry_id} --build <build>`."]
    return "\n".join(lines)
