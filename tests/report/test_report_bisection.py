"""The upstream report's Bisection section: what the run store's bisections and the registry establish, or 'not run'."""

from __future__ import annotations

import shutil
from pathlib import Path

from report_fixtures import d2_outcome, make_target
from kvdiag import __version__, resources
from kvdiag.records.bisect import BisectRecord, CommitEvidence, Direction, StepRecord
from kvdiag.registry.loader import load_registry
from kvdiag.report.bisection import bisection_markdown, latest_bisections
from kvdiag.report.upstream import upstream_report
from kvdiag.store.runs import RunDir, RunStore

OLD, NEW, FOUND = "1" * 40, "2" * 40, "3" * 40


def entry(tmp_path: Path, name: str, edit=None):
    root = tmp_path / "registry"
    root.mkdir(exist_ok=True)
    text = (resources.registry_dir() / f"{name}.md").read_text()
    (root / f"{name}.md").write_text(edit(text) if edit else text)
    return load_registry(root).get(name)


def d2_without_commits(text: str) -> str:
    """D2 as it was written before any range named a commit (every `introduced` "0", no `fixed`)."""
    import re

    text = re.sub(r'^(introduced|fixed|last_affected) = "(?!0")[^"]*"\n', "", text, flags=re.M)
    return re.sub(r'^\[\[affected\]\]\nrepo = ("[^"]*")\n(?!introduced)', r'[[affected]]\nrepo = \1\nintroduced = "0"\n',
                  text, flags=re.M)


def bisect_run(store: RunStore, run_id: str, record: BisectRecord, status: str = "finished") -> None:
    path = store.root / run_id
    path.mkdir(parents=True)
    RunDir(path).write("run.json", {"entry": f"{record.entry_id}-bisect", "kind": "bisect", "status": status,
                                    "bisect": record.to_dict()})


def record(direction: Direction, found: str | None, **extra) -> BisectRecord:
    steps = (StepRecord(OLD, "confirmed", "x", 0, role="old end"), StepRecord(NEW, "not-reproduced", "y", 1,
                                                                             role="new end"))
    evidence = CommitEvidence(found, "the change", "not-reproduced", "clean") if found else None
    return BisectRecord("D2", direction, OLD, NEW, evidence, None, extra.pop("candidates", ()), steps,
                        extra.pop("message", "found"), "/runs/x", source="/src/ggml", **extra)


def test_d2_without_a_bisection_or_a_commit_says_it_has_not_been_run(tmp_path: Path):
    d2 = entry(tmp_path, "D2", d2_without_commits)
    home = tmp_path / "home"
    path = RunStore(home).root / "20261129-100000-D2-ab12"
    path.mkdir(parents=True)
    outcome = d2_outcome()
    RunDir(path).write("run.json", {"kvdiag_version": __version__, "entry": "D2", "step": outcome.step,
                                    "status": "finished", "target": make_target(), "overrides": {},
                                    "outcome": outcome.to_dict()})
    text = upstream_report(d2, RunDir(path))
    section = text.split("## Bisection\n\n", 1)[1].split("\n\n## ", 1)[0]
    assert section == ("No `kvdiag bisect` of D2 is recorded in this run store, and the registry names no commit "
                       "that introduced or fixed it: bisection has not been run.")


def test_the_real_d2_report_has_a_bisection_section_saying_what_is_known(tmp_path: Path):
    d2 = entry(tmp_path, "D2")
    text = bisection_markdown(d2, RunStore(tmp_path / "empty"))
    assert "No `kvdiag bisect` of D2 is recorded in this run store" in text


def test_the_newest_finished_bisection_of_each_direction_is_stated_with_run_date_and_tree(tmp_path: Path):
    d2 = entry(tmp_path, "D2", d2_without_commits)
    store = RunStore(tmp_path / "home")
    bisect_run(store, "20261201-100000.000000-0001-D2-bisect", record(Direction.FIX, "9" * 40))
    bisect_run(store, "20261202-100000.000000-0001-D2-bisect", record(Direction.FIX, FOUND))
    bisect_run(store, "20261203-100000.000000-0001-D2-bisect", record(Direction.FIX, "8" * 40), status="running")
    bisect_run(store, "20261202-110000.000000-0002-D2-bisect",
               record(Direction.CAUSE, None, candidates=("4" * 40, "5" * 40),
                      message="only skipped commits are left: the first bad commit is one of these 2"))
    bisect_run(store, "20261202-120000.000000-0003-D3-bisect", record(Direction.CAUSE, "7" * 40))
    found = latest_bisections(store, "D2")
    assert [(f.record.direction, f.run_id[:8]) for f in found] == [(Direction.CAUSE, "20261202"),
                                                                   (Direction.FIX, "20261202")]
    lines = bisection_markdown(d2, store, when=lambda run_id: run_id[:8]).splitlines()
    assert lines[0] == ("- **cause bisection, no commit named**: only skipped commits are left: the first bad commit "
                        "is one of these 2 (`444444444444`, `555555555555`); established by `kvdiag bisect --cause` "
                        f"over `{OLD[:12]}..{NEW[:12]}` (2 commits judged, both ends as required), run "
                        "`20261202-110000.000000-0002-D2-bisect` (20261202), tree `/src/ggml`.")
    assert lines[1].startswith(f"- **fixed by `{FOUND[:12]}`** (the change): established by `kvdiag bisect --fix`")
    assert len(lines) == 2


def test_ends_that_did_not_hold_are_reported_as_such(tmp_path: Path):
    d2 = entry(tmp_path, "D2", d2_without_commits)
    store = RunStore(tmp_path / "home")
    bisect_run(store, "20261202-100000.000000-0001-D2-bisect",
               record(Direction.CAUSE, None, ends_verified=False, message="the ends do not bracket a change: …"))
    text = bisection_markdown(d2, store)
    assert text.startswith("- **cause bisection, no commit named**: the ends do not bracket a change: …; "
                           "established by `kvdiag bisect --cause`")
    assert "the ends NOT as required" in text


def test_registry_commits_are_listed_per_repository_with_their_note(tmp_path: Path):
    def with_commits(text: str) -> str:
        return d2_without_commits(text).replace(
            'repo = "https://github.com/ggml-org/ggml"\nintroduced = "0"\n',
            'repo = "https://github.com/ggml-org/ggml"\nintroduced = "0f36dae8' + "0" * 32 + '"\n'
            'fixed = "abc1234' + "0" * 33 + '"\n', 1)
    d2 = entry(tmp_path, "D2", with_commits)
    text = bisection_markdown(d2, None)
    assert text.splitlines()[0].startswith("- In the registry, for https://github.com/ggml-org/ggml: introduced "
                                           "`0f36dae80000`, fixed `abc123400000` (")   # full ids, shortened
    assert text.splitlines()[-1] == "No `kvdiag bisect` of D2 is recorded in this run store."
    shutil.rmtree(tmp_path / "registry")


def test_a_resumed_bisection_says_which_of_its_commits_were_taken_from_which_run(tmp_path: Path):
    d2 = entry(tmp_path, "D2", d2_without_commits)
    store = RunStore(tmp_path / "home")
    earlier = "20261203-083120.720411-0001-D2-bisect"
    steps = (StepRecord(OLD, "confirmed", "x", 0, role="old end", reused_from=earlier),
             StepRecord(NEW, "not-reproduced", "y", 1, role="new end"))
    resumed = BisectRecord("D2", Direction.FIX, OLD, NEW, CommitEvidence(FOUND, "the change", "not-reproduced",
                                                                         "clean"), None, (), steps, "found",
                           "/runs/x", source="/src/ggml", extra={"resumed_from": earlier})
    bisect_run(store, "20261204-100000.000000-0001-D2-bisect", resumed)
    line = bisection_markdown(d2, store).splitlines()[0]
    assert f"(2 commits judged, 1 of them taken from run `{earlier}`, both ends as required)" in line
