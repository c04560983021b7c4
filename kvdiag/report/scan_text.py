"""`kvdiag scan`'s text: every case's verdict, the sites and instantiations hit, the counts."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from kvdiag.engine.scan import ScanResult
from kvdiag.engine.verdict import Verdict
from kvdiag.report.templating import render


def render_scan(result: ScanResult, run_dir: Path) -> str:
    rows = []
    for params, attempt in sorted(result.results.items(), key=lambda kv: (kv[1].verdict.value, kv[0])):
        ev = attempt.evidence
        rows.append((attempt.verdict.value, ev.error_count if ev.error_count is not None else "-",
                     ", ".join(s["site"] for s in ev.sites[:2]) or "-", f"{attempt.duration_s:.1f}", params))
    counts = {v.value: len(result.by_verdict(v)) for v in Verdict}
    other = sum(n for k, n in counts.items() if k not in ("confirmed", "not-reproduced", "inconclusive"))
    per_device = [f"GPU {k}: {v['cases']} case(s), {v['affected']} affected, {v['case_s']:.1f} s of case time"
                  for k, v in result.per_device().items()]
    return render("scan.txt.j2", r=result, table=tabulate(rows, headers=["verdict", "errors", "site", "s", "case"]),
                  per_device=per_device,
                  again_reasons=list(dict.fromkeys(b["why_again"] for b in result.batches if b["why_again"])),
                  counts=counts, other=other, sites=list(result.sites().values()), insts=result.instantiations(),
                  run_dir=run_dir)
