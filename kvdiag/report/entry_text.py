"""`kvdiag show`: an entry as text, rendered from a jinja2 template."""

from __future__ import annotations

from typing import Any

from kvdiag.report.templating import render


def render_entry(entry, plans: dict[str, Any] | None = None) -> str:
    return render("entry.txt.j2", e=entry, plans=plans)
