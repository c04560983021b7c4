"""Export registry entries as OSV JSON (schema 1.6), so other tooling can read them.

OSV's GIT ranges carry commit events; kvdiag's `affected` tables map onto them
one to one. Entries with no range still export, with an empty `affected`.
"""

from __future__ import annotations

from typing import Any

from kvdiag.registry.entry import Entry

OSV_SCHEMA_VERSION = "1.6.0"


def entry_to_osv(entry: Entry) -> dict[str, Any]:
    affected = []
    for rng in entry.affected:
        events: list[dict[str, str]] = [{"introduced": rng["introduced"]}]
        for key in ("fixed", "last_affected"):
            if rng.get(key):
                events.append({key: rng[key]})
        affected.append({
            "package": {"name": rng["repo"].rstrip("/").split("/")[-1], "ecosystem": "GIT"},
            "ranges": [{"type": "GIT", "repo": rng["repo"], "events": events}],
            "database_specific": {"note": rng.get("note", "")},
        })
    return {
        "schema_version": OSV_SCHEMA_VERSION,
        "id": f"KVDIAG-{entry.id}",
        "modified": f"{entry.modified}T00:00:00Z",
        "published": f"{entry.reported}T00:00:00Z",
        "aliases": list(entry.aliases),
        "related": [f"KVDIAG-{r}" for r in entry.related],
        "summary": entry.title,
        "details": entry.summary,
        "affected": affected,
        "references": [{"type": _osv_ref_type(r["type"]), "url": r["url"]} for r in entry.references],
        "database_specific": {
            "owner": entry.owner,
            "status": entry.status,
            "severity": entry.severity,
            "component": entry.location.get("component"),
            "files": list(entry.location.get("files", [])),
        },
    }


def _osv_ref_type(kind: str) -> str:
    # OSV has no SEED type; a seed document is evidence.
    return "EVIDENCE" if kind == "SEED" else kind
