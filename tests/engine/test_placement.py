"""Placing a tree without usable git history (a tarball, a shallow clone) by its files, on a staged ggml history.

The staged history, ggml's own layout (CMakeLists.txt stamps the version)::

    A (0.1.0, fattn v1) - B (fattn v2: introduces) - C (other file) - F (fattn v3: fixes) - G (0.2.0)

The tree is exported at a commit with ``git archive`` (no .git, as a release tarball
unpacks) and placed by ``--history`` (``$KVDIAG_HISTORY``), or by an index written
from the same history in the shipped index's place (``kvdiag/data/ggml-blobs.json``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from history_repos import GGML_URL, LLAMA_URL, Staged, isolated_git  # noqa: F401 - fixture
from kvdiag.engine.verdict import placement as placement_module
from kvdiag.engine.verdict.placement import tree_range_evidence as range_evidence
from kvdiag.engine.verdict.ranges import short
from kvdiag.registry.entry import Entry
from kvdiag.workspace.placement.blob_timeline import timeline_from_git
from kvdiag.workspace.placement.blobs import blob_id, read_version_stamp
from kvdiag.workspace.history import HISTORY_ENV, TreeHistory

FATTN = "src/ggml-cuda/fattn.cu"


def cmake(version: str) -> str:
    major, minor, patch = version.split(".")
    return (f"set(GGML_VERSION_MAJOR {major})\nset(GGML_VERSION_MINOR {minor})\nset(GGML_VERSION_PATCH {patch})\n")


@pytest.fixture
def ggml(tmp_path: Path, isolated_git, monkeypatch):
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    repo = Staged(tmp_path / "ggml", remote=GGML_URL)
    c = {"A": repo.commit("A", {"CMakeLists.txt": cmake("0.1.0"), "src/ggml.c": "int x;\n", FATTN: "v1\n"}),
         "B": repo.commit("B introduces", {FATTN: "v2\n"}),
         "C": repo.commit("C", {"src/other.c": "other\n"}),
         "F": repo.commit("F fixes", {FATTN: "v3\n"}),
         "G": repo.commit("G bumps", {"CMakeLists.txt": cmake("0.2.0")})}
    return repo, c


def entry(c: dict[str, str], *tables: dict) -> Entry:
    return Entry(id="D99", title="t", summary="s", owner="upstream", status="open", severity="low",
                 reported="2026-01-01", modified="2026-01-01", path=Path("D99.md"), body="b", raw={},
                 location={"files": [FATTN]},
                 affected=tables or ({"repo": GGML_URL, "introduced": c["B"], "fixed": c["F"]},))


def judged(tree: Path, e: Entry, tmp_path: Path):
    logs = tmp_path / f"logs-{tree.name}"
    logs.mkdir(exist_ok=True)
    return range_evidence(e, TreeHistory(tree, logs))


def test_blob_ids_are_gits_own(tmp_path):
    sample = tmp_path / "f.cu"
    sample.write_bytes(b"__global__ void k() {}\n\x00\xff")
    done = subprocess.run(["git", "hash-object", str(sample)], capture_output=True, text=True, check=True)
    assert blob_id(sample.read_bytes()) == done.stdout.strip()


def test_a_tarball_is_placed_by_its_files_in_the_named_history(ggml, tmp_path, monkeypatch):
    repo, c = ggml
    monkeypatch.setenv(HISTORY_ENV, str(repo.path))
    inside = judged(repo.exported(tmp_path / "at-C", c["C"]), entry(c), tmp_path)
    assert (inside.status, inside.placement) == ("affected", "history")
    assert f"{short(c['B'])} (2026-01-01) .. {short(c['C'])} (2026-01-01) (2 commits)" in inside.placed
    assert inside.detail.endswith(f"(the same at each of {short(c['B'])}, {short(c['C'])})")
    fixed = judged(repo.exported(tmp_path / "at-G", c["G"]), entry(c), tmp_path)
    assert (fixed.status, fixed.placement) == ("fixed", "history")
    before = judged(repo.exported(tmp_path / "at-A", c["A"]), entry(c), tmp_path)
    assert (before.status, before.placement) == ("unaffected", "history")


def test_without_a_named_history_the_tarball_is_unplaced_and_says_why(ggml, tmp_path):
    repo, c = ggml
    evidence = judged(repo.exported(tmp_path / "at-C", c["C"]), entry(c), tmp_path)
    assert (evidence.status, evidence.placement) == ("unknown", "unplaced")
    assert "src/ggml-cuda/fattn.cu (" in evidence.placed and "matches no version of it" in evidence.placed
    assert evidence.summary.startswith("range unknown (no .git: ")


def test_a_shallow_clone_is_placed_by_its_head_commit_in_the_named_history(ggml, tmp_path, monkeypatch):
    repo, c = ggml
    shallow = repo.shallow_clone(tmp_path / "shallow", branch="master", depth=1)
    alone = judged(shallow, entry(c), tmp_path)
    assert alone.status == "unknown"                      # git alone: the fix is not in the fetched history
    monkeypatch.setenv(HISTORY_ENV, str(repo.path))
    placed = judged(shallow, entry(c), tmp_path)
    assert (placed.status, placed.placement, placed.head) == ("fixed", "history", c["G"])
    assert placed.placed == f"git commit {short(c['G'])} found in history {repo.path}"


@pytest.fixture
def shipped(ggml, tmp_path, monkeypatch):
    """An index written from the staged history (the generator's own code) in the shipped index's place."""
    repo, c = ggml
    timeline = timeline_from_git(repo.path, [FATTN], log_dir=tmp_path, repo_url=GGML_URL,
                                 keep_commits=[c["B"], c["F"]])
    index = tmp_path / "index.json"
    index.write_text(json.dumps(timeline.to_dict()))
    monkeypatch.setattr(placement_module, "SHIPPED_INDEX", index)
    return repo, c


def test_the_shipped_index_places_a_tarball_without_git(shipped, tmp_path):
    repo, c = shipped
    evidence = judged(repo.exported(tmp_path / "at-C", c["C"]), entry(c), tmp_path)
    assert (evidence.status, evidence.placement) == ("affected", "index")
    assert evidence.short == "affected [index]"
    assert "placed by blob match of 1 file(s) (src/ggml-cuda/fattn.cu) against the shipped index" in evidence.summary


def test_a_ggml_tree_is_outside_a_range_recorded_only_for_llama_cpp(shipped, tmp_path):
    repo, c = shipped
    llama_only = entry(c, {"repo": LLAMA_URL, "introduced": "0"})
    evidence = judged(repo.exported(tmp_path / "at-C", c["C"]), llama_only, tmp_path)
    assert (evidence.status, evidence.placement) == ("unaffected", "index")


def test_a_llama_cpp_tree_carrying_ggml_files_is_not_judged_by_llama_cpp_ranges(shipped, tmp_path):
    """Content says what the files are, not which repository holds them (a fork may): unknown."""
    repo, c = shipped
    tree = tmp_path / "llama"
    repo.exported(tree / "ggml", c["C"])
    evidence = judged(tree, entry(c, {"repo": LLAMA_URL, "introduced": "0"}), tmp_path)
    assert (evidence.status, evidence.placement) == ("unknown", "unplaced")
    carried = judged(tree, entry(c), tmp_path)
    assert (carried.status, carried.placement) == ("affected", "index")


def test_a_changed_file_is_placed_only_by_the_version_stamp_for_the_entries_that_do_not_name_it(shipped, tmp_path):
    """The stamp dates the tree's ggml; a file that matches no version of it holds the tree's own change,
    which may be the fix (the BeeLlama fork's tarball: its stamp put it among ggml's affected commits,
    yet its own change to fattn-mma-f16.cuh had bounded D19's read; device session 26)."""
    repo, c = shipped
    tree = repo.exported(tmp_path / "at-G", c["G"])
    (tree / FATTN).write_text("v3 with a local change\n")
    assert read_version_stamp(tree).ggml == "0.2.0"
    own = judged(tree, entry(c), tmp_path)
    assert (own.status, own.placement) == ("unknown", "unplaced")
    assert "stamp: the entry's own file does not fit: src/ggml-cuda/fattn.cu (" in own.placed
    other = entry(c)
    other = Entry(**{**other.__dict__, "location": {"files": ["src/ggml.c"]}})
    evidence = judged(tree, other, tmp_path)
    assert (evidence.status, evidence.placement) == ("fixed", "stamp")
    assert "version stamp GGML_VERSION 0.2.0 (CMakeLists.txt)" in evidence.placed
    old = repo.exported(tmp_path / "at-C", c["C"])
    (old / FATTN).write_text("v2 changed\n")
    assert judged(old, entry(c), tmp_path).status == "unknown"
    spanning = judged(old, other, tmp_path)       # 0.1.0 ran from A to F: the range differs across them
    assert spanning.status == "unknown" and "the range differs across them" in spanning.detail


def test_the_record_of_a_placement_survives_a_round_trip(shipped, tmp_path):
    from kvdiag.records.ranges import RangeEvidence

    repo, c = shipped
    evidence = judged(repo.exported(tmp_path / "at-C", c["C"]), entry(c), tmp_path)
    assert RangeEvidence.from_dict(evidence.to_dict()) == evidence
