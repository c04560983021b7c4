"""One jinja2 environment for every rendered artefact.

Autoescape is on for HTML templates (their names end in .html.j2) and off for
text and Markdown; undefined variables are errors, never empty strings.
"""

from __future__ import annotations

import jinja2

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("kvdiag", "templates"),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "html"), default_for_string=False),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=False,
)


def render(template_name: str, **context) -> str:
    return _ENV.get_template(template_name).render(**context)


def _text_helpers() -> dict:
    from kvdiag.report.held_back import held_back_lines, one_line, reason_counts

    return {"held_back_lines": held_back_lines, "one_line": one_line, "reason_counts": reason_counts}


# Every text template may say why an inconclusive is one, on one line, and what lifts it.
_ENV.globals.update(_text_helpers())
