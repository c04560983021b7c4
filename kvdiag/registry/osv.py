"""Export registry entries as OSV records (schema 1.7.5), as an OSV database holds them.

Each entry becomes one record, ``KVDIAG-D2``; `write_osv_database` writes one
``<id>.json`` per record, the layout OSV databases keep. The records validate
against the official OSV schema (ossf/osv-schema v1.7.5) with one documented
exception: ``KVDIAG-`` is a private prefix, not one of OSV's registered home
databases, so the schema's ``id`` pattern rejects it.

``aliases`` holds only ids of the same defect in other advisory databases
(``CVE-2025-1234``, ``GHSA-xxxx-xxxx-xxxx``); an upstream issue or pull request
is a link, and links are ``references``. `alias_problem` is the rule, and
``kvdiag registry lint`` applies it to the registry's sources, so an export
never has to drop anything. OSV's GIT ranges carry commit events; kvdiag's
``affected`` tables map onto them one to one (`GitRange.events`: every introduced,
fixed, last_affected and limit commit, in that order).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

from kvdiag.registry.entry import Entry

#: the release of ossf/osv-schema the records are validated against (tests/fixtures/schemas/)
OSV_SCHEMA_VERSION = "1.7.5"
#: kvdiag's private id prefix (unregistered with OSV: the one schema error a record has)
ID_PREFIX = "KVDIAG-"
#: OSV's reference types (the schema's enum)
REFERENCE_TYPES = ("ADVISORY", "ARTICLE", "DETECTION", "DISCUSSION", "REPORT", "FIX", "INTRODUCED", "GIT",
                   "PACKAGE", "EVIDENCE", "WEB")

# PREFIX-rest, as OSV ids are written: CVE-2024-1234, GHSA-abcd-efgh-ijkl, PYSEC-2024-1, SUSE-SU-2024:1.
_ADVISORY_ID = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:-[A-Z]{1,3})?-[A-Za-z0-9][A-Za-z0-9._:-]*$")


def osv_id(entry_id: str) -> str:
    return f"{ID_PREFIX}{entry_id}"


def alias_problem(alias: str) -> str | None:
    """Why ``alias`` cannot be an OSV alias (None when it can): aliases are advisory ids only."""
    if not isinstance(alias, str) or not _ADVISORY_ID.match(alias):
        return (f"{alias!r} is not an advisory id (CVE-…, GHSA-…): an upstream issue or pull request "
                f"belongs in [[references]] (type REPORT or FIX)")
    if alias.startswith(ID_PREFIX):
        return f"{alias!r} is kvdiag's own id: name other entries in `related`"
    return None


def reference_type(kind: str) -> str:
    """kvdiag's reference type as OSV's (OSV has no SEED: a seed document is evidence)."""
    return "EVIDENCE" if kind == "SEED" else kind


def entry_to_osv(entry: Entry) -> dict[str, Any]:
    affected = []
    for rng in entry.ranges:
        affected.append({
            "package": {"name": rng.repo.rstrip("/").split("/")[-1], "ecosystem": "GIT"},
            "ranges": [{"type": "GIT", "repo": rng.repo, "events": rng.events()}],
            "database_specific": {"note": rng.note},
        })
    return {
        "schema_version": OSV_SCHEMA_VERSION,
        "id": osv_id(entry.id),
        "modified": f"{entry.modified}T00:00:00Z",
        "published": f"{entry.reported}T00:00:00Z",
        "aliases": [a for a in entry.aliases if alias_problem(a) is None],
        "related": [osv_id(r) for r in entry.related],
        "summary": entry.title,
        "details": entry.summary,
        "affected": affected,
        "references": [{"type": reference_type(r["type"]), "url": r["url"]} for r in entry.references],
        "database_specific": {
            "owner": entry.owner,
            "status": entry.status,
            "severity": entry.severity,
            "component": entry.location.get("component"),
            "files": list(entry.location.get("files", [])),
        },
    }


def write_osv_database(records: Iterable[dict[str, Any]], directory: Path) -> list[tuple[Path, Path]]:
    """One ``<id>.json`` per record under ``directory`` (created), each written atomically;
    (the path, the file written) for each: they differ where the path is a symlink."""
    from kvdiag.fileio import write_atomic

    directory = Path(directory)
    written = []
    for record in records:
        path = directory / f"{record['id']}.json"
        written.append((path, write_atomic(path, json.dumps(record, indent=2) + "\n")))
    return written
