"""A discovery shown: the roots table for a terminal, Markdown for an issue, JSON, SARIF, HTML.

Every format reads the same ``DiscoverResult``: one row per root (tool and kind, site and its
line, function, kernels, ops and cases, the smallest case, errors, whether the numeric test
also failed, known entry or new), the racecheck warnings apart, and the totals that account
for every case (judged or cut, with why).
"""

from __future__ import annotations

import hashlib
import html
import json
from typing import Callable, Sequence

from tabulate import tabulate

from kvdiag.engine.discover.cases import CUT, totals
from kvdiag.engine.discover.frames import MIXED_BACKTRACE, frameless_tools
from kvdiag.engine.discover.occupancy import Occupancy
from kvdiag.proc.mps import MpsPipe
from kvdiag.engine.discover.reframe import FRAMES, LAUNCHES
from kvdiag.engine.discover.result import DiscoverResult
from kvdiag.engine.discover.roots import Root

FORMATS = ("text", "json", "markdown", "sarif", "html")
SHOW_CUT = 20


def _row(root: Root, markdown: bool = False, frameless: Sequence[str] = ()) -> list[str]:
    """One root's table row; ``frameless``: the tools whose records came without device frames, whose
    kernels column may name an inlined function (marked so)."""
    d = root.to_dict()
    tick = "`" if markdown else ""
    smallest = d["smallest"] or {}
    rerun = d.get("frames") or {}
    framed = rerun.get("kernels")
    names = list(framed or d["kernels"])
    kernels = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
    if framed:
        kernels += (" (frames of its smallest case)" if rerun.get("by", FRAMES) == FRAMES
                    else " (holding shared memory in its smallest case)")
    elif d["tool"] in frameless:
        kernels += " (no frames)"
    ops = ", ".join(f"{op} {n}" for op, n in d["ops"].items())
    line = d["source_line"] or ""
    return [d["known"] or "new", f"{d['tool']} {d['kind']}", f"{tick}{d['site']}{tick}",
            f"{tick}{line[:70]}{tick}" if line else "", d["function"], kernels, ops, str(d["cases"]),
            f"{tick}{smallest.get('op')}({smallest.get('params')}){tick}", str(d["errors"]), _numeric(d)]


def _numeric(d) -> str:
    """FAIL count of the root's cases, and how many had no numeric test (a case that aborted, or one whose
    numeric run of its own did not end)."""
    unchecked = d.get("numeric_unchecked") or 0
    return f"{d['numeric_failed']}" + (f" ({unchecked} not tested)" if unchecked else "")


HEADERS = ["entry", "tool kind", "site", "source line", "function", "kernels", "ops (cases)", "cases",
           "smallest case", "errors", "numeric FAIL"]


def totals_line(result: DiscoverResult) -> str:
    t = totals(result.records).to_dict()
    whole = t["all"]
    per_state = ", ".join(f"{n} {state}" for state, n in whole.items() if n)
    return (f"{t['judged'] + t['cut']} case run(s) over {len(result.tools)} tool(s) ({', '.join(result.tools)}): "
            f"{t['judged']} judged, {t['cut']} cut ({per_state}); {len(result.defects)} root(s), "
            f"{len(result.new_roots)} new, {len(result.warnings)} racecheck warning root(s); "
            f"{len(result.processes)} process(es), {result.wall_s:.1f} s")


def time_line(result: DiscoverResult, most: int = 5) -> str | None:
    """Where the processes' time went, by tool and op: the few that dominate a whole-suite discovery
    (TOP_K's largest cases under racecheck, FLASH_ATTN_EXT) are what a maintainer narrows with --ops."""
    spent: dict[tuple[str, str], float] = {}
    for row in result.processes:
        key = (str(row.get("tool")), str(row.get("op")))
        spent[key] = spent.get(key, 0.0) + float(row.get("wall_s") or 0.0)
    if not spent:
        return None
    total = sum(spent.values())
    ranked = sorted(spent.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{op} under {tool} {s:.0f} s" for (tool, op), s in ranked[:most])
    rest = total - sum(s for _, s in ranked[:most])
    return (f"process time: {total:.0f} s over {len(result.processes)} process(es): {shown}"
            + (f", the other {len(ranked) - most} op/tool pair(s) {rest:.0f} s" if len(ranked) > most else ""))


def _frameless(result: DiscoverResult) -> list[str]:
    return [] if result.backtrace == MIXED_BACKTRACE else frameless_tools(result.tools, result.backtrace)


def backtrace_line(result: DiscoverResult) -> str | None:
    """Which tools' records came without device frames (--backtrace), when any did."""
    if result.backtrace == MIXED_BACKTRACE:
        return "backtrace: the shards ran different --backtrace values (each shard's record says which)"
    tools = frameless_tools(result.tools, result.backtrace)
    if not tools:
        return None
    line = (f"backtrace: {', '.join(tools)} without device frames (--backtrace {result.backtrace}): an inlined "
            "function names itself as its kernel")
    framed = [row for row in result.frames if row.get("by", FRAMES) == FRAMES]
    if framed:
        named = sum(1 for row in framed if row.get("kernels"))
        line += (f"; {named} of {len(framed)} such root(s) had their smallest case run again with device "
                 f"frames, which name their launching kernels")
    return line


def launches_line(result: DiscoverResult) -> str | None:
    """How the racecheck roots got their kernels: racecheck's race records carry no device frames."""
    rows = [row for row in result.frames if row.get("by") == LAUNCHES]
    if not rows:
        return None
    named = sum(1 for row in rows if row.get("kernels"))
    return (f"kernels: racecheck's race records name no launching kernel; {named} of {len(rows)} racecheck root(s) "
            f"name the kernels holding shared memory among the launches of their smallest case, run alone")


def routing_line(result: DiscoverResult) -> str | None:
    """Which tools ran on fewer cases because they could not see the rest, and how many."""
    routing = result.routing or {}
    if not routing.get("routed"):
        return f"routing: none ({routing['why']})" if routing.get("why") else None
    return (f"routing: {routing['why']}: {routing.get('sanitized', 0)} case run(s) sanitized, "
            f"{routing.get('spared', 0)} spared")


def cut_lines(result: DiscoverResult) -> list[str]:
    cut = [r for r in result.records if r.state == CUT]
    lines = [f"cut: {r.tool} {r.op}({r.params}): {r.why}" for r in cut[:SHOW_CUT]]
    if len(cut) > SHOW_CUT:
        lines.append(f"cut: … and {len(cut) - SHOW_CUT} more (every one is in the JSON)")
    return lines


def mps_line(result: DiscoverResult) -> str | None:
    pipe = MpsPipe.from_dict(result.mps)
    return pipe.describe() if pipe is not None else None


def order_line(result: DiscoverResult) -> str | None:
    """Whose measured costs put the heaviest processes first (engine.discover.costs), when it is known."""
    if not result.order:
        return None
    return f"order: each tool's heaviest processes first, by the costs measured in {result.order}"


def render_text(result: DiscoverResult) -> str:
    out = [totals_line(result)]
    if result.space.get("no_cases"):
        out.append(f"no case in this suite: {', '.join(result.space['no_cases'])} (listed by --list-ops)")
    for tool, gate in result.gates.items():
        if gate.get("run") and not gate.get("trusted"):
            out.append(f"note: {tool}: {gate['reason']}")
    spent = time_line(result)
    if spent:
        out.append(spent)
    ran = Occupancy.from_dict(result.occupancy)
    if ran is not None:
        out.append(ran.describe())
    out += [line for line in (order_line(result),) if line]
    mps = mps_line(result)
    if mps:
        out.append(mps)
    routed = routing_line(result)
    if routed:
        out.append(routed)
    out += [line for line in (backtrace_line(result), launches_line(result)) if line]
    if result.program:
        out.append(f"program: {result.program.get('mode')} mode ({result.program.get('why')})"
                   + (f"; numeric test of the cases with findings: {len(result.numeric_runs)} process(es)"
                      if result.program.get("mode") == "launch" else ""))
    if result.defects:
        out += ["", tabulate([_row(r, frameless=_frameless(result)) for r in result.defects], headers=HEADERS,
                              tablefmt="simple")]
    else:
        out.append("no root: no finding in any judged case")
    if result.warnings:
        out += ["", f"racecheck warnings (not counted as defects): {len(result.warnings)} root(s)",
                tabulate([_row(r, frameless=_frameless(result)) for r in result.warnings], headers=HEADERS,
                         tablefmt="simple")]
    out += cut_lines(result)
    if result.run_dir:
        out.append(f"run: {result.run_dir}")
    return "\n".join(out) + "\n"


def render_markdown(result: DiscoverResult) -> str:
    notes = [line for line in (time_line(result), order_line(result), routing_line(result), backtrace_line(result),
                               launches_line(result), mps_line(result)) if line]
    out = ["# kvdiag discover", "", totals_line(result), ""] + [f"{line}\n" for line in notes]
    if result.defects:
        out += [tabulate([_row(r, True, _frameless(result)) for r in result.defects], headers=HEADERS,
                         tablefmt="github"), ""]
    if result.warnings:
        out += ["## Racecheck warnings (not counted as defects)", "",
                tabulate([_row(r, True, _frameless(result)) for r in result.warnings], headers=HEADERS,
                         tablefmt="github"), ""]
    cut = cut_lines(result)
    if cut:
        out += ["## Cases not judged", ""] + [f"- {line}" for line in cut] + [""]
    return "\n".join(out)


def render_json(result: DiscoverResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=False) + "\n"


def render_sarif(result: DiscoverResult) -> str:
    """One SARIF result per root (warnings at level ``warning``), at its site in the tree."""
    rules, results = [], []
    for root in result.roots:
        d = root.to_dict()
        rule = f"discover/{d['tool']}/{d['kind']}"
        if rule not in [r["id"] for r in rules]:
            rules.append({"id": rule, "shortDescription": {"text": f"{d['tool']} {d['kind']}"}})
        where = {"physicalLocation": {"artifactLocation": {"uri": d["path"] or d["site"].rsplit(":", 1)[0],
                                                           "uriBaseId": "SRCROOT"},
                                      **({"region": {"startLine": d["line"]}} if d["line"] else {})}}
        digest = hashlib.sha256(f"{d['tool']}|{d['kind']}|{d['site']}|{d['function']}".encode()).hexdigest()[:32]
        results.append({"ruleId": rule, "level": "warning" if d["warning"] else "error",
                        "message": {"text": f"{d['kind']} in {d['function']} ({d['cases']} case(s); smallest "
                                            f"{(d['smallest'] or {}).get('op')}({(d['smallest'] or {}).get('params')}); "
                                            f"{d['known'] or 'not in the registry'})"},
                        "locations": [where], "partialFingerprints": {"kvdiag/discover/v1": digest}})
    doc = {"$schema": "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json",
           "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "kvdiag", "version": result.kvdiag_version, "rules": rules}},
                     "originalUriBaseIds": {"SRCROOT": {"description": {"text": "the discovered source tree"}}},
                     "results": results, "properties": {"totals": totals(result.records).to_dict()}}]}
    return json.dumps(doc, indent=2) + "\n"


def render_html(result: DiscoverResult) -> str:
    def table(roots: list[Root]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
        cells = (_row(r, frameless=_frameless(result)) for r in roots)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>kvdiag discover</title></head><body>",
             "<h1>kvdiag discover</h1>", f"<p>{html.escape(totals_line(result))}</p>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in (backtrace_line(result), launches_line(result), mps_line(result))
              if line]
    parts.append(table(result.defects))
    if result.warnings:
        parts += ["<h2>Racecheck warnings (not counted as defects)</h2>", table(result.warnings)]
    cut = cut_lines(result)
    if cut:
        parts += ["<h2>Cases not judged</h2><ul>"] + [f"<li>{html.escape(c)}</li>" for c in cut] + ["</ul>"]
    return "".join(parts) + "</body></html>\n"


RENDERERS: dict[str, Callable[[DiscoverResult], str]] = {
    "text": render_text, "json": render_json, "markdown": render_markdown, "sarif": render_sarif, "html": render_html}


def render(result: DiscoverResult, fmt: str) -> str:
    return RENDERERS[fmt](result)


def exit_code(result: DiscoverResult, *, new_only: bool = False) -> int:
    """1 when a root was found (a new one, with ``new_only``), 130 interrupted, 4 when nothing was found
    but some case was cut, else 0."""
    if result.interrupted:
        return 130
    roots = result.new_roots if new_only else result.defects
    if roots:
        return 1
    return 4 if any(r.state == CUT for r in result.records) else 0
