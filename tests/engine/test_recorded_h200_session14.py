"""Device session 14 on the H200 (tests/fixtures/device/h200-session14): D1's cause bisection finished. Both ends
as required (the old end taken from session 10 through 12 and 13, the new end built and confirmed), git's two steps
skipped for not building, three candidates on the first-parent line, and the report stating it with the registry's
answer, c9e746733."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from kvdiag.records.bisect import BisectRecord, Direction
from kvdiag.registry.loader import load_registry
from kvdiag.report.bisection import bisection_markdown, latest_bisections
from recorded_d1_bisection import FIXTURES, OLD_END, REPO, SESSION10, SESSION13, SESSION14, stores

HERE = FIXTURES / "h200-session14"
NEW_END = "c9e746733a55a44648e0764c70d49bb5c49149cc"
MERGE = "23b1268bebada428ca92aba3040481a557c9d23f"
NO_TURBO = "f7832345bf764a4ad6d4e9197bb6a26ac0b0d8fc"
NEW_END_RUN = "20261204-041732.224579-0004-D1"


def _bisection(root: Path) -> BisectRecord:
    data = json.loads((stores(root, "h200-session14").root / SESSION14 / "run.json").read_text())
    assert data["status"] == "finished" and data["kind"] == "bisect"
    return BisectRecord.from_dict(data["bisect"])


def test_the_bisection_finished_with_three_first_parent_candidates_and_both_ends_as_required(tmp_path: Path):
    record = _bisection(tmp_path)
    assert record.direction is Direction.CAUSE and (record.old, record.new) == (OLD_END, NEW_END)
    assert record.found is None and record.ends_verified and record.exit_code == 4
    assert set(record.candidates) == {MERGE, NO_TURBO, NEW_END}
    assert record.extra["resumed_from"] == SESSION13 and record.first_parent
    verdicts = {s.commit: (s.role, s.verdict) for s in record.steps}
    assert verdicts == {OLD_END: ("old end", "not-reproduced"), NEW_END: ("new end", "confirmed"),
                        MERGE: ("step", "build-failed"), NO_TURBO: ("step", "build-failed")}
    assert [s.commit for s in record.skipped()] == [MERGE, NO_TURBO]


def test_git_alone_would_have_named_the_merged_upstream_commits_too(tmp_path: Path):
    """git bisect's log counts the 364 upstream commits 23b1268be merged; the record keeps the fork's own three."""
    log = (stores(tmp_path, "h200-session14").root / SESSION14 / "bisect-log.txt").read_text()
    assert log.count("# possible first bad commit:") == 367
    assert "git bisect start '--first-parent'" in log


def test_every_step_has_its_own_times_and_the_old_end_names_session_10s_evidence(tmp_path: Path):
    steps = {s.commit: s for s in _bisection(tmp_path).steps}
    old, new = steps[OLD_END], steps[NEW_END]
    assert (old.reused_from, old.build_s, old.run_s) == (SESSION10, 1266.698, 2.248)
    assert new.reused_from is None and (new.configure_s, new.build_s, new.run_s) == (6.439, 1380.096, 1.042)
    assert (steps[MERGE].build_s, steps[NO_TURBO].build_s) == (1.37, 55.11)
    assert "'GGML_OP_KVARN_VIEW' undeclared" in steps[MERGE].reason
    assert "turbo4-tcq-codebook.cuh: No such file or directory" in steps[NO_TURBO].reason


def test_the_new_ends_abort_is_the_vector_launchers_site_the_registry_records_for_that_commit(tmp_path: Path):
    run = json.loads((stores(tmp_path, "h200-session14").root / NEW_END_RUN / "run.json").read_text())
    assert run["target"]["build"]["git"]["commit"] == NEW_END
    (attempt,) = run["outcome"]["attempts"]
    evidence = attempt["evidence"]
    assert attempt["verdict"] == "confirmed" and evidence["exit"] == "killed by SIGABRT (6)"
    assert [(a["file"], a["line"]) for a in evidence["aborts"]] == [("fattn.cu", 313)]
    assert evidence["cases_not_supported"] == 24 and evidence["cases_executed"] == 0
    d1 = load_registry(REPO / "registry").get("D1")
    (site,) = d1.raw["location"]["sites"]
    assert site["at"]["c9e746733"] == 313


def _builds() -> list[list[tuple[float, float, str]]]:
    """ninja's log split into its builds: entries are written as edges finish, so a build's end times only grow."""
    builds: list[list[tuple[float, float, str]]] = [[]]
    for line in (HERE / "bisection.ninja_log").read_text().splitlines()[1:]:
        start, end, _, name, _ = line.split("\t")
        row = (int(start) / 1000, int(end) / 1000, name)
        if builds[-1] and row[1] < builds[-1][-1][1] - 1:
            builds.append([])
        builds[-1].append(row)
    return builds


def test_the_new_end_was_a_full_build_and_the_step_after_it_was_incremental():
    new_end, no_turbo = _builds()
    assert len(new_end) == 527 and max(end for _, end, _ in new_end) == 1380.053
    kvarn = sorted(end - start for start, end, name in new_end if "fattn-mma-kvarn-instance-" in name)
    assert len(kvarn) == 16 and 531 < kvarn[0] and kvarn[-1] < 897
    assert round(sum(end - start for start, end, _ in new_end)) == 21746
    assert len(no_turbo) == 47 and max(end for _, end, _ in no_turbo) < 55.2


def test_the_report_states_the_bisection_and_the_registrys_answer(tmp_path: Path):
    store = stores(tmp_path, "h200-session14")
    d1 = load_registry(REPO / "registry").get("D1")
    (finding,) = latest_bisections(store, "D1")
    assert finding.run_id == SESSION14
    text = bisection_markdown(d1, store)
    assert ("**cause bisection, no commit named**: only skipped commits are left: the first bad commit is one of "
            "these 3 (`23b1268bebad`, `f7832345bf76`, `c9e746733a55`)") in text
    assert "1 of them taken from run `20261203-083120.720411-0001-D1-bisect`, both ends as required" in text
    assert "In the registry, for https://github.com/GenerelSchwerz/llama.cpp: introduced `c9e746733a55`" in text
    assert "Introduced by c9e746733, established on an H200" in text


def test_no_machine_path_is_left_in_the_record():
    with tarfile.open(HERE / "store.tar.gz") as archive:
        texts = [(m.name, archive.extractfile(m).read().decode("utf-8", "replace"))
                 for m in archive.getmembers() if m.isfile()]
    for path in ("bisect.json", "bisection.ninja_log"):
        texts.append((path, (HERE / path).read_text()))
    for name, text in texts:
        assert "/tmp/d/" not in text and "kvdiag-bisect-D1-" not in text, name
