"""The report's "Where": the entry's location in the reported build's own tree.

A reader pastes the report into an issue about *their* build, so the files are
named as that tree has them (llama.cpp keeps ggml under ``ggml/``) and the site
is the line the run placed in that tree (``outcome.extra["site"]``, see
engine.verdict.site_check), not the lines the registry recorded for other trees. Where
the run could not place it, the recorded lines are still given, labelled as the
other trees' they are.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvdiag.registry.entry import Entry
from kvdiag.store.source_paths import in_layout, layout_of_build, record_sources
from kvdiag.workspace.sites import SiteSpec


def where(entry: Entry, target: Mapping[str, Any] | None, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``component``, ``files``, ``functions`` and ``sites`` (each one line of text), or {} without a location."""
    loc = entry.location or {}
    if not loc:
        return {}
    build = (target or {}).get("build") or {}
    files = list(loc.get("files") or ())
    in_tree = record_sources(files, build.get("source_dir"))
    if in_tree is None:
        in_tree = [in_layout(f, layout_of_build(build)) for f in files]
    return {"component": loc.get("component"), "files": in_tree, "functions": list(loc.get("functions") or ()),
            "sites": site_lines(entry, (extra or {}).get("site"), build),
            "lines": None if loc.get("sites") else loc.get("lines")}


def site_lines(entry: Entry, placed: Mapping[str, Any] | None, build: Mapping[str, Any]) -> list[str]:
    """One line per registry site: where the run placed it in this tree, with what the detector
    printed; else the line the registry records for this build's commit; else how it is found
    and the lines recorded for other trees."""
    specs = [SiteSpec.from_table(t) for t in (entry.location or {}).get("sites", ())]
    placements = list((placed or {}).get("registry") or ())
    printed = ", ".join(f"`{p}`" for p in (placed or {}).get("printed") or ())
    commit = ((build or {}).get("git") or {}).get("commit")
    out = []
    for spec in specs:
        mine = next((p for p in placements if p.get("finds") == spec.describe() and p.get("line")), None)
        record = spec.recorded_for(commit)
        if mine is not None:
            said = f"; the detector printed {printed}" if printed else ""
            out.append(f"`{mine['file']}:{mine['line']}` in this build's tree ({spec.describe()}, found "
                       f"{mine.get('how') or 'by its context'}){said}")
        elif record is not None:
            out.append(f"`{in_layout(spec.file, layout_of_build(build))}:{record[1]}` in this build's tree "
                       f"({spec.describe()}, the line recorded for {record[0]})")
        else:
            recorded = f"; recorded in other trees: {spec.recorded()}" if spec.at else ""
            out.append(f"{spec.describe()} in `{spec.file}`, not placed in this build's tree{recorded}")
    return out
