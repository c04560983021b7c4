"""The fork's /completion answer with MTP drafting, as recorded by kvdiag's own CPU run of D3's step.

tests/fixtures/cpu-fork-775450a68-mtp/server-mtp-1.requests.jsonl holds the request,
kvdiag's record of it and the server's raw answer: the draft counters kvdiag reads
from ``timings`` must be the ones the answer carries (and the server's log prints).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvdiag.server.outcome import draft_stats

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "cpu-fork-775450a68-mtp"


def test_draft_counters_come_from_the_answers_timings():
    line = json.loads((RECORDED / "server-mtp-1.requests.jsonl").read_text().splitlines()[0])
    answer = json.loads(line["body"]["text"])
    assert draft_stats(answer) == {"draft_n": 806, "draft_n_accepted": 629, "acceptance": 0.7804}
    assert line["record"]["draft"] == draft_stats(answer)
    assert answer["tokens_predicted"] == 900 and answer["stop_type"] == "limit"
    assert set(answer["content"]) <= {chr(c) for c in range(0x20, 0x7F)}     # printable ASCII only
    log = (RECORDED / "server-mtp-1.combined.log").read_text()
    assert "draft acceptance = 0.78040 (  629 accepted /   806 generated)" in log
