"""The registry's affected ranges: the linter's rules, the OSV export, and the history they rest on.

History facts come from `tests/fixtures/ranges/history.json`, recorded from clones of
llama.cpp (with the fork) and ggml by `tests/fixtures/ranges/record.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdiag.engine.verdict.ranges import evaluate_range
from kvdiag.registry.loader import load_registry
from kvdiag.registry.ranges import GitRange, range_problems
from kvdiag.registry.repos import BEELLAMA, GGML, KNOWN_REPOS, LLAMA_CPP, known_repo, normalize_url
from kvdiag.workspace.history import HistoryFacts

ROOT = Path(__file__).resolve().parents[2]
HISTORY = json.loads((ROOT / "tests" / "fixtures" / "ranges" / "history.json").read_text())
FULL = "85f99dca8b4539163e6858c9df7c9e8b0ad3632a"


@pytest.fixture(scope="module")
def registry():
    return load_registry(ROOT / "registry")


# ------------------------------------------------------------------ the linter's rules

def problems(**table) -> list[tuple[str, str]]:
    return range_problems({"repo": LLAMA_CPP, **table})


def test_a_well_formed_range_has_no_problem():
    assert problems(introduced="0", fixed=FULL) == []
    assert problems(introduced=["0", "1" * 40], fixed=[FULL, "2" * 40], limit=["*"]) == []


@pytest.mark.parametrize("table, key, says", [
    ({"introduced": "0", "fixed": "85f99dca8"}, "fixed", "'85f99dca8' is not a full commit id"),
    ({"introduced": FULL.upper()}, "introduced", "40 lower-case hex digits"),
    ({"introduced": "0", "fixed": "0"}, "fixed", "'0' is not a full commit id"),
    ({"introduced": "*"}, "introduced", '(or "0": from the beginning)'),
    ({"introduced": "0", "limit": "tip"}, "limit", '(or "*": no limit)'),
    ({"introduced": FULL, "fixed": FULL}, "fixed", "85f99dca8b45 is both introduced and fixed"),
    ({"introduced": "0", "fixed": FULL, "last_affected": "1" * 40}, "last_affected", "not both (OSV)"),
    ({"introduced": []}, "introduced", "at least one introduced commit"),
])
def test_each_malformed_range_is_named(table, key, says):
    found = problems(**table)
    assert any(k == key and says in message for k, message in found), found


def test_a_repository_must_be_known_and_spelled_as_ranges_spell_it():
    (unknown,) = range_problems({"repo": "https://github.com/example/llama.cpp", "introduced": "0"})
    assert unknown[0] == "repo" and "not a repository kvdiag knows" in unknown[1]
    (alias,) = range_problems({"repo": "https://github.com/ggerganov/llama.cpp", "introduced": "0"})
    assert alias == ("repo", f"write 'https://github.com/ggerganov/llama.cpp' as '{LLAMA_CPP}', the url ranges use for it")


def test_urls_of_every_spelling_name_the_same_repository():
    for url in ("https://github.com/ggml-org/llama.cpp.git", "git@github.com:ggml-org/llama.cpp.git",
                "ssh://git@github.com/ggml-org/llama.cpp", "https://github.com/GGML-org/llama.cpp/"):
        assert known_repo(url).url == LLAMA_CPP, url
    assert known_repo("/home/user/mirror/llama.cpp") is None
    assert normalize_url("git@github.com:GenerelSchwerz/llama.cpp.git") == "github.com/generelschwerz/llama.cpp"


def test_the_osv_events_keep_every_commit_introduced_first():
    rng = GitRange.from_table({"repo": GGML, "introduced": ["0", "1" * 40], "fixed": FULL, "limit": "*"})
    assert rng.events() == [{"introduced": "0"}, {"introduced": "1" * 40}, {"fixed": FULL}, {"limit": "*"}]
    assert rng.commits() == ("1" * 40, FULL) and rng.bounded == ()


# ------------------------------------------------------------------ the registry against recorded history

def test_every_commit_of_every_range_exists_in_its_repository(registry):
    named = {c: (e.id, r.repo) for e in registry.entries for r in e.ranges for c in r.commits()}
    assert named, "the registry names no commit"
    for commit, (entry, repo) in named.items():
        record = HISTORY["commits"].get(commit)
        assert record is not None, f"{entry}: {commit} was not recorded (run tests/fixtures/ranges/record.py)"
        assert record["present"], f"{entry}: {commit} is not in the {record['clone']} clone"
        assert record["clone"] == ("ggml" if repo == GGML else "llama.cpp"), f"{entry}: {commit} in the wrong repo"


def test_every_introduced_commit_comes_before_what_ends_its_range(registry):
    recorded = {(r["entry"], json.dumps(r["events"])): r["order"] for r in HISTORY["ranges"]}
    for entry in registry.entries:
        for rng in entry.ranges:
            order = recorded.get((entry.id, json.dumps(rng.events())))
            assert order is not None, f"{entry.id}: range {rng.events()} not recorded (re-run record.py)"
            assert all(pair["is_ancestor"] for pair in order), (entry.id, order)


def test_fork_ranges_name_only_fork_commits_and_upstream_ranges_only_upstream_ones(registry):
    """A fork range's commits are not in upstream master (so no upstream tree is placed by them);
    an upstream llama.cpp range's commits are (and the fork, which contains them, is covered)."""
    for entry in registry.entries:
        for rng in entry.ranges:
            for commit in rng.commits():
                record = HISTORY["commits"][commit]
                if rng.repo == BEELLAMA:
                    assert record["in_fork_head"] and not record["in_upstream_master"], (entry.id, commit)
                elif rng.repo == LLAMA_CPP:
                    assert record["in_upstream_master"], (entry.id, commit)


def test_the_fork_marker_and_the_roots_identify_their_repositories():
    fork = HISTORY["repos"][BEELLAMA]
    assert fork["markers"] == list(KNOWN_REPOS[BEELLAMA].markers)
    assert fork["markers_before_fork_head"] == [True] and fork["markers_in_upstream_master"] == [False]
    for url in (GGML, LLAMA_CPP):
        (root,) = KNOWN_REPOS[url].roots
        assert HISTORY["commits"][root]["subject"] == "Initial release"


def test_d11_has_ggml_and_llama_cpp_ranges_of_the_same_fix(registry):
    ggml, llama = registry.get("D11").ranges
    assert (ggml.repo, llama.repo) == (GGML, LLAMA_CPP)
    ggml_fix, llama_fix = (HISTORY["commits"][r.fixed[0]] for r in (ggml, llama))
    assert llama_fix["subject"] == "ggml: support concat for scalar types at cuda backend (#24011)"
    assert ggml_fix["subject"] == "ggml: support concat for scalar types at cuda backend (llama/24011)"
    assert llama_fix["date"] == ggml_fix["date"] == "2026-06-12"
    assert llama_fix["in_fork_head"], "the fork descends from the fix: D11 is fixed there by range"


def test_d11_release_tags_before_and_after_the_fix():
    tags = HISTORY["d11_release_tags"]
    before = [t for t, v in tags.items() if not v["has_d11_fix"]]
    assert sorted(before) == ["b4094", "b5279", "b6000", "b7498", "b8032", "b9000", "b9213", "b9500", "b9584"]
    assert tags["b9584"]["commit"] == "e25a32e98c15a1118a976685af0f4d2c1f380079"   # the probe's commit
    assert tags["b10497"]["has_d11_fix"]


def test_every_entry_of_a_repository_defect_has_a_range(registry):
    """Build and toolchain defects (D12, D13, D20, D21) are not commits of a repository; a claim confirmed nowhere
    (D6) has no commit to name: a range of introduced = "0" would say every tree has it, and a tree
    inside a range is never not-applicable, so it would overrule the entry's source fact. Every other
    entry has a range."""
    without = sorted(e.id for e in registry.entries if not e.ranges)
    assert without == ["D12", "D13", "D20", "D21", "D6"]
    assert all(registry.get(i).owner in ("build", "toolchain") or registry.get(i).status == "unconfirmed"
               for i in without)


# ------------------------------------------------------------------ D14-D16: the trees of device session 15

class RecordedTree:
    """A tree's history as record.py saw it (HEAD, and which range commits it descends from), asked the
    questions kvdiag.engine.verdict.ranges asks a clone; a complete clone, so an absent commit is no ancestor."""

    def __init__(self, clone: str, label: str):
        tree = HISTORY["trees"][clone][label]
        self.head, self.has = tree["head"], tree["has"]

    def facts(self) -> HistoryFacts:
        return HistoryFacts(head=self.head, why_none=None)

    def has_commit(self, commit: str) -> bool:
        return commit in self.has or commit == self.head

    def is_ancestor(self, older: str, newer: str) -> bool:
        assert newer == self.head, "the ranges of D14-D16 have one introduced commit: only HEAD is asked"
        return older == newer or self.has[older]


@pytest.mark.parametrize("entry_id", ["D14", "D15", "D16"])
@pytest.mark.parametrize("clone, inside, past", [("ggml", "v0.9.7", "d99724f2"), ("llama.cpp", "b8032", "775450a68")])
def test_session_15s_trees_are_inside_and_past_each_new_entrys_range(registry, entry_id, clone, inside, past):
    """The device pair of h100-session15: ggml v0.9.7 (confirmed) inside each range, d99724f2
    (not-reproduced) past its fix; in llama.cpp the release of the same weeks, b8032, inside and the
    fork's head past the fix."""
    (rng,) = [r for r in registry.get(entry_id).ranges if (r.repo == GGML) == (clone == "ggml")]
    assert evaluate_range(rng, RecordedTree(clone, inside)).status == "affected"
    fixed = evaluate_range(rng, RecordedTree(clone, past))
    assert fixed.status == "fixed" and fixed.detail.startswith(f"{rng.fixed[0][:9]} is an ancestor of ")


# ------------------------------------------------------------------ D17: the trees of device session 16

@pytest.mark.parametrize("clone, label, status", [
    ("ggml", "v0.9.4", "affected"), ("llama.cpp", "b6100", "affected"),
    ("ggml", "v0.9.7", "fixed"), ("ggml", "d99724f2", "fixed"),
    ("llama.cpp", "b8032", "fixed"), ("llama.cpp", "b9000", "fixed"), ("llama.cpp", "775450a68", "fixed"),
])
def test_d17s_ranges_place_session_16s_trees_as_its_sweeps_found_them(registry, clone, label, status):
    """h100-session16's racecheck step printed D17's race on ggml v0.9.4 and llama.cpp b6100, and none
    on ggml v0.9.7, d99724f2 and llama.cpp b9000: the first two descend from the kernel's introduction
    (d693430f / 5d46babdc) and not from its rewrite (4c540d0b / 24af22fc3), the others from both, as do
    b8032 and the fork's head."""
    (rng,) = [r for r in registry.get("D17").ranges if (r.repo == GGML) == (clone == "ggml")]
    placed = evaluate_range(rng, RecordedTree(clone, label))
    assert placed.status == status
    if status == "fixed":
        assert placed.detail.startswith(f"{rng.fixed[0][:9]} is an ancestor of ")
