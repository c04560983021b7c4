"""Affected ranges judged by git ancestry, on real histories staged in the test (OSV GIT semantics).

The staged history (dates increase with it)::

    master:  A - B - C - F - D - G - E - H
                      \\
    rel:               R1 - RF - R2

B introduces the defect, F fixes it on master and RF (its cherry-pick) on rel; G
brings it back and H fixes it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from history_repos import FORK_URL, GGML_URL, LLAMA_URL, Staged, git, isolated_git  # noqa: F401 - fixture
from kvdiag.engine.verdict.ranges import applicable_ranges, evaluate_range, identify, range_evidence, short
from kvdiag.registry.entry import Entry
from kvdiag.registry.ranges import GitRange
from kvdiag.workspace.history import TreeHistory


@pytest.fixture
def dag(tmp_path: Path, isolated_git):
    repo = Staged(tmp_path / "upstream", remote=LLAMA_URL)
    c = {"A": repo.commit("A"), "B": repo.commit("B introduces"), "C": repo.commit("C")}
    repo.branch("rel", c["C"])
    c["R1"] = repo.commit("R1")
    c["RF"] = repo.commit("RF cherry-picked fix")
    c["R2"] = repo.commit("R2")
    repo.checkout("master")
    for name in ("F", "D", "G", "E", "H"):
        c[name] = repo.commit(name)
    return repo, c


def at(repo: Staged, rev: str, tmp_path: Path) -> TreeHistory:
    repo.checkout(rev)
    logs = tmp_path / f"logs-{rev[:7]}"
    logs.mkdir(exist_ok=True)
    return TreeHistory(repo.path, logs)


def entry(*tables: dict) -> Entry:
    return Entry(id="D99", title="t", summary="s", owner="upstream", status="open", severity="low",
                 reported="2026-01-01", modified="2026-01-01", path=Path("D99.md"), body="b", raw={},
                 affected=tuple(tables))


# ------------------------------------------------------------------ one range, OSV events

def test_introduced_0_and_a_fix_place_heads_before_and_after_it(dag, tmp_path):
    repo, c = dag
    rng = GitRange(LLAMA_URL, ("0",), fixed=(c["F"],))
    before = evaluate_range(rng, at(repo, c["C"], tmp_path))
    assert (before.status, before.detail) == ("affected", f"introduced 0, fixed {short(c['F'])} not an ancestor "
                                                          f"of {short(c['C'])}")
    for rev in ("F", "D"):
        after = evaluate_range(rng, at(repo, c[rev], tmp_path))
        assert (after.status, after.detail) == ("fixed", f"{short(c['F'])} is an ancestor of {short(c[rev])}")


def test_before_the_introducing_commit_is_outside_the_range(dag, tmp_path):
    repo, c = dag
    rng = GitRange(LLAMA_URL, (c["B"],), fixed=(c["F"],))
    assert evaluate_range(rng, at(repo, c["A"], tmp_path)).detail == (
        f"introduced {short(c['B'])} is not an ancestor of {short(c['A'])}")
    assert evaluate_range(rng, at(repo, c["A"], tmp_path)).status == "unaffected"
    inside = evaluate_range(rng, at(repo, c["C"], tmp_path))
    assert (inside.status, inside.detail) == ("affected", f"introduced {short(c['B'])} is an ancestor of "
                                                          f"{short(c['C'])}, fixed {short(c['F'])} not an ancestor "
                                                          f"of {short(c['C'])}")


def test_a_fix_cherry_picked_to_a_branch_is_a_second_fixed_event(dag, tmp_path):
    repo, c = dag
    rng = GitRange(LLAMA_URL, (c["B"],), fixed=(c["F"], c["RF"]))
    assert evaluate_range(rng, at(repo, c["R1"], tmp_path)).status == "affected"
    fixed = evaluate_range(rng, at(repo, c["R2"], tmp_path))
    assert (fixed.status, fixed.detail) == ("fixed", f"{short(c['RF'])} is an ancestor of {short(c['R2'])}")
    only_master_fix = GitRange(LLAMA_URL, (c["B"],), fixed=(c["F"],))
    assert evaluate_range(only_master_fix, at(repo, c["R2"], tmp_path)).status == "affected"


def test_a_defect_brought_back_after_its_fix_is_affected_again(dag, tmp_path):
    """Multiple introduced/fixed events: a fix counts only against an introduction before it."""
    repo, c = dag
    rng = GitRange(LLAMA_URL, (c["B"], c["G"]), fixed=(c["F"], c["H"]))
    expected = {"C": "affected", "F": "fixed", "D": "fixed", "G": "affected", "E": "affected", "H": "fixed",
                "A": "unaffected"}
    assert {rev: evaluate_range(rng, at(repo, c[rev], tmp_path)).status for rev in expected} == expected
    again = evaluate_range(rng, at(repo, c["E"], tmp_path))
    assert again.detail == (f"introduced {short(c['G'])} is an ancestor of {short(c['E'])}, fixed {short(c['F'])} "
                            f"comes before {short(c['G'])}, fixed {short(c['H'])} not an ancestor of {short(c['E'])}")


def test_last_affected_includes_itself_and_nothing_after_it(dag, tmp_path):
    repo, c = dag
    rng = GitRange(LLAMA_URL, ("0",), last_affected=(c["C"],))
    assert evaluate_range(rng, at(repo, c["B"], tmp_path)).status == "affected"
    assert evaluate_range(rng, at(repo, c["C"], tmp_path)).status == "affected"
    after = evaluate_range(rng, at(repo, c["F"], tmp_path))
    assert (after.status, after.detail) == ("fixed", f"{short(c['F'])} comes after last_affected {short(c['C'])}")


def test_a_limit_covers_only_its_ancestors(dag, tmp_path):
    repo, c = dag
    rng = GitRange(LLAMA_URL, (c["B"],), limit=(c["R2"],))
    assert evaluate_range(rng, at(repo, c["R1"], tmp_path)).status == "affected"
    beyond = evaluate_range(rng, at(repo, c["D"], tmp_path))
    assert (beyond.status, beyond.detail) == ("unaffected", f"{short(c['D'])} is beyond the range's limit "
                                                            f"{short(c['R2'])}")
    assert evaluate_range(rng, at(repo, c["R2"], tmp_path)).status == "unaffected"   # the limit itself is out
    unbounded = GitRange(LLAMA_URL, (c["B"],), limit=("*",))
    assert evaluate_range(unbounded, at(repo, c["D"], tmp_path)).status == "affected"


def test_a_fix_absent_from_a_complete_clone_is_not_in_heads_history(dag, tmp_path):
    """A clone of the release branch alone lacks master's fix commit: complete history, so not an ancestor."""
    repo, c = dag
    clone = repo.full_clone(tmp_path / "rel-only", branch="rel", single_branch=True)
    history = TreeHistory(clone, tmp_path)
    assert not history.has_commit(c["F"])
    found = evaluate_range(GitRange(LLAMA_URL, ("0",), fixed=(c["F"],)), history)
    assert (found.status, found.detail) == ("affected", f"introduced 0, fixed {short(c['F'])} not an ancestor of "
                                                        f"{short(c['R2'])}")


# ------------------------------------------------------------------ shallow clones and missing history

def test_a_shallow_clone_without_the_fix_cannot_say(dag, tmp_path):
    repo, c = dag
    repo.tag("b9000", c["C"])
    clone = repo.shallow_clone(tmp_path / "shallow", branch="b9000", depth=1)
    history = TreeHistory(clone, tmp_path)
    assert history.facts().shallow and history.facts().roots == ()
    found = evaluate_range(GitRange(LLAMA_URL, ("0",), fixed=(c["F"],)), history)
    assert (found.status, found.detail) == ("unknown", f"shallow clone: {short(c['F'])} is not in the fetched "
                                                       f"history")


def test_a_shallow_clone_that_holds_head_and_the_fix_is_decidable(dag, tmp_path):
    """--shallow-since a date before HEAD, on the branch that has the fix: HEAD is an ancestor of the
    fix, so the fix is not an ancestor of HEAD; and after the fix, it is one."""
    repo, c = dag
    stamp = git(repo.path, "show", "-s", "--format=%cI", c["B"])
    clone = repo.shallow_clone(tmp_path / "since", branch="master", depth=None, since=stamp, checkout=c["C"])
    history = TreeHistory(clone, tmp_path)
    assert history.facts().shallow
    rng = GitRange(LLAMA_URL, ("0",), fixed=(c["F"],))
    assert evaluate_range(rng, history).status == "affected"
    git(clone, "checkout", "-q", c["D"])
    assert evaluate_range(rng, TreeHistory(clone, tmp_path)).status == "fixed"


def test_a_shallow_clone_cut_after_the_introducing_commit_cannot_place_head(dag, tmp_path):
    repo, c = dag
    clone = repo.shallow_clone(tmp_path / "cut", branch="rel", depth=2)
    found = evaluate_range(GitRange(LLAMA_URL, (c["B"],)), TreeHistory(clone, tmp_path))
    assert found.status == "unknown" and found.detail == f"shallow clone: {short(c['B'])} is not in the fetched history"


# ------------------------------------------------------------------ which ranges apply: the tree's repository

def test_the_tree_is_identified_by_remote_url_root_commit_or_a_commit_only_it_has(dag, tmp_path):
    repo, c = dag
    assert identify(at(repo, c["D"], tmp_path)).repos == {LLAMA_URL: f"remote {LLAMA_URL}"}
    git(repo.path, "remote", "set-url", "origin", "git@github.com:ggml-org/llama.cpp.git")
    assert LLAMA_URL in identify(TreeHistory(repo.path, tmp_path)).repos
    git(repo.path, "remote", "remove", "origin")
    anonymous = TreeHistory(repo.path, tmp_path)
    assert identify(anonymous).repos == {}
    assert identify(anonymous, {GGML_URL: (c["F"],)}).repos == {GGML_URL: f"has commit {short(c['F'])}"}


def test_a_fork_is_also_the_upstream_it_contains(dag, tmp_path):
    repo, c = dag
    git(repo.path, "remote", "set-url", "origin", FORK_URL)
    found = identify(at(repo, c["D"], tmp_path)).repos
    assert found == {FORK_URL: f"remote {FORK_URL}",
                     LLAMA_URL: "contains its history, as the BeeLlama fork"}


def test_upstream_ranges_apply_to_a_fork_and_ggml_ranges_do_not_apply_to_llama_cpp(dag, tmp_path):
    repo, c = dag
    llama = {"repo": LLAMA_URL, "introduced": "0", "fixed": c["F"]}
    ggml_only = {"repo": GGML_URL, "introduced": "0", "fixed": "da7d1472dcd5bb6e415fd39b571cc8506c9e2b07"}
    git(repo.path, "remote", "set-url", "origin", FORK_URL)
    evidence = range_evidence(entry(ggml_only, llama), at(repo, c["C"], tmp_path))
    assert evidence.status == "affected" and evidence.summary == (
        f"affected by range (introduced 0, fixed {short(c['F'])} not an ancestor of {short(c['C'])})")
    assert [f.repo for f in evidence.findings] == [LLAMA_URL]
    outside = range_evidence(entry(ggml_only), TreeHistory(repo.path, tmp_path))
    assert (outside.status, outside.detail) == ("unaffected", "this tree is BeeLlama fork, llama.cpp; the entry "
                                                              "records the defect only in ggml")


def test_a_forks_own_range_decides_on_the_fork_where_upstreams_is_still_open(dag, tmp_path):
    """Upstream never fixed it (its range is open); the fork fixed it at F: on the fork the fork's range
    decides (fixed past F), upstream's open range no longer wins with "affected"; an entry with no fork
    range still gives the fork upstream's. Before this rule the fork at D read "affected"."""
    repo, c = dag
    upstream_open = {"repo": LLAMA_URL, "introduced": c["B"]}
    fork_fixed = {"repo": FORK_URL, "introduced": c["B"], "fixed": c["F"]}
    git(repo.path, "remote", "set-url", "origin", FORK_URL)
    past = range_evidence(entry(upstream_open, fork_fixed), at(repo, c["D"], tmp_path))
    assert past.status == "fixed" and [f.repo for f in past.findings] == [FORK_URL]
    inside = range_evidence(entry(upstream_open, fork_fixed), at(repo, c["C"], tmp_path))
    assert inside.status == "affected" and [f.repo for f in inside.findings] == [FORK_URL]
    only_upstream = range_evidence(entry(upstream_open), at(repo, c["D"], tmp_path))
    assert only_upstream.status == "affected" and [f.repo for f in only_upstream.findings] == [LLAMA_URL]


def test_applicable_ranges_keeps_a_contained_repositorys_ranges_only_without_one_of_the_container():
    upstream, fork, ggml = GitRange(LLAMA_URL, ("0",)), GitRange(FORK_URL, ("0",)), GitRange(GGML_URL, ("0",))
    assert applicable_ranges([upstream, fork, ggml], {FORK_URL, LLAMA_URL}) == [fork]
    assert applicable_ranges([upstream, ggml], {FORK_URL, LLAMA_URL}) == [upstream]
    assert applicable_ranges([upstream, fork], {LLAMA_URL}) == [upstream]
    assert applicable_ranges([ggml], {LLAMA_URL}) == []


def test_without_git_or_identity_the_range_is_unknown_and_says_why(dag, tmp_path):
    repo, c = dag
    plain = repo.exported(tmp_path / "tarball", c["C"])
    assert range_evidence(entry({"repo": LLAMA_URL, "introduced": "0"}), TreeHistory(plain, tmp_path)).summary == (
        f"range unknown (no .git: {plain} is not a git checkout)")
    git(repo.path, "remote", "remove", "origin")
    unnamed = range_evidence(entry({"repo": LLAMA_URL, "introduced": "0"}), at(repo, c["C"], tmp_path))
    assert unnamed.status == "unknown" and unnamed.detail.startswith("repository not identified (no remote URL, "
                                                                     "root commit or commit of ggml, llama.cpp")
    assert range_evidence(entry(), None).status == "none"
    assert range_evidence(entry({"repo": LLAMA_URL, "introduced": "0"}),
                          TreeHistory(tmp_path / "nowhere", tmp_path)).detail.endswith("does not exist here")


def test_answers_are_asked_of_git_once_per_tree(dag, tmp_path):
    repo, c = dag
    history = at(repo, c["C"], tmp_path)
    rng = entry({"repo": LLAMA_URL, "introduced": "0", "fixed": c["F"]})
    first = range_evidence(rng, history)
    logs = sorted(p.name for p in history.log_dir.glob("*.cmd.json"))
    assert range_evidence(rng, history) is first
    evaluate_range(GitRange(LLAMA_URL, ("0",), fixed=(c["F"],)), history)
    assert sorted(p.name for p in history.log_dir.glob("*.cmd.json")) == logs
