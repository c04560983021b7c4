"""HTML: one self-contained page (inline CSS, no script) from `sweep.html.j2`, autoescaped.

Everything from logs reaches the page through jinja2's autoescape, so a quoted
line such as ``<script>…`` shows as text; the template never marks log text safe.
"""

from __future__ import annotations

from kvdiag.report.formats import SweepFormatter
from kvdiag.report.formats.markdown import sweep_context
from kvdiag.report.templating import render

#: verdicts whose evidence is open on the page; the rest are folded
OPEN_VERDICTS = ("confirmed", "error", "inconclusive")


class HtmlFormat(SweepFormatter):
    suffix = ".html"

    def format(self, sweep) -> str:
        return render("sweep.html.j2", **sweep_context(sweep), open_verdicts=OPEN_VERDICTS)
