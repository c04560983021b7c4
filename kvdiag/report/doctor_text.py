"""`kvdiag doctor` as text: the checks and the canary controls, as tables."""

from __future__ import annotations

from tabulate import tabulate

from kvdiag.report.templating import render


def render_doctor(report) -> str:
    checks = tabulate([(c.status.upper(), c.name, c.detail) for c in report.checks],
                      headers=["", "check", "detail"])
    controls = tabulate(
        [("PASS" if c.passed else "FAIL", c.tool, c.canary, c.launcher or "-", c.summary()
          + (f" (cached {c.cached_from})" if c.cached_from else "")) for c in report.controls],
        headers=["", "tool", "canary", "launcher", "result"], maxcolwidths=[None, None, None, None, 90])
    return render("doctor.txt.j2", r=report, checks=checks, controls=controls)
