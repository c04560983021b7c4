"""kvdiag bisect in both directions on the synthetic git project (git_projects): real `git bisect run`,
real scratch worktrees, the project's fake build and test-backend-ops (CPU only)."""

from __future__ import annotations

import json
from pathlib import Path

from git_projects import BUILD, CONFIGURE, commit, env, git, new_project, run_cli, scratch_dirs, worktrees  # noqa: F401
from kvdiag.records.bisect import BAD, GOOD, SKIP, BisectRecord, Direction


def bisect(env: Path, src: Path, old: str, new: str, *extra: str) -> list[str]:
    return ["--registry", str(env), "bisect", "D90", "--source", str(src), "--old", old, "--new", new,
            "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet", *extra]


def test_cause_bisection_blames_the_introducing_commit_and_skips_the_broken_build(tmp_path: Path, env: Path,
                                                                                   capsys):
    src = new_project(tmp_path / "history", kernel="uniform")                          # 1 good
    shas = [git(src, "rev-parse", "HEAD")]
    shas.append(commit(src, "2: docs", README="docs\n"))                               # 2 good
    shas.append(commit(src, "3: refactor (does not build)", kernel="uniform syntax error"))
    shas.append(commit(src, "4: refactor fixed", kernel="uniform"))                    # 4 good
    shas.append(commit(src, "5: split the barrier", kernel="divergent"))               # 5 bad: the culprit
    for n in (6, 7, 8, 9):    # 9 commits: the first midpoint is 5, then 3 (skipped), then 4 or 2
        shas.append(commit(src, f"{n}: more docs", README=f"docs {n}\n"))
    (src / "wip.txt").write_text("the user's untracked work\n")
    status = git(src, "status", "--porcelain")
    code = run_cli(["--registry", str(env), "bisect", "D90", "--source", str(src), "--good", shas[0],
                    "--bad", shas[8], "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet",
                    "--format", "json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0, captured.err
    assert report["direction"] == "cause" and report["ends_verified"] is True
    assert report["found"]["commit"] == shas[4] == report["first_bad"]["commit"]
    assert report["found"]["subject"] == "5: split the barrier"
    assert report["found"]["verdict"] == "confirmed"
    assert report["parent"]["commit"] == shas[3] and report["parent"]["verdict"] == "not-reproduced"
    # the two ends are judged first, in order, then git's steps
    assert [(s["role"], s["commit"], s["exit"]) for s in report["steps"][:2]] == [
        ("old end", shas[0], GOOD), ("new end", shas[8], BAD)]
    by_commit = {s["commit"]: s for s in report["steps"]}
    assert by_commit[shas[2]]["verdict"] == "build-failed" and by_commit[shas[2]]["exit"] == SKIP
    assert all(s["exit"] in (0, 1, 125) for s in report["steps"])
    # one build tree for the whole bisection: every step's run names the same build folder
    build_dirs = {json.loads((Path(s["run_dir"]) / "run.json").read_text())["target"]["build"]["build_dir"]
                  for s in report["steps"] if s["run_dir"]}
    assert len(build_dirs) == 1 and build_dirs.pop().endswith("/build")
    # every step says where its time went; every step configures (the same tree) and builds
    assert all(s["configure_s"] is not None for s in report["steps"])
    assert all(s["build_s"] is not None for s in report["steps"] if s["verdict"] != "build-failed")
    assert all(s["run_s"] is not None for s in report["steps"] if s["verdict"] != "build-failed")
    # evidence read back from the record, not re-run: the step file is the report's source
    steps_file = Path(report["run_dir"]) / "bisect-steps.json"
    assert json.loads(steps_file.read_text()) == report["steps"]
    # the user's tree, HEAD and branches are as they were; no bisect state, no worktree left
    assert git(src, "status", "--porcelain") == status
    assert git(src, "rev-parse", "HEAD") == shas[8] and git(src, "branch", "--show-current") == "main"
    assert worktrees(src) == [str(src)]
    assert not (src / ".git" / "BISECT_LOG").exists()
    assert git(src, "for-each-ref", "refs/bisect") == ""


def test_cause_text_names_the_commit_and_its_parent_with_its_own_evidence(tmp_path: Path, env: Path, capsys):
    src = new_project(tmp_path / "short", kernel="uniform")
    good = git(src, "rev-parse", "HEAD")
    culprit = commit(src, "make it divergent", kernel="divergent")
    bad = commit(src, "docs", README="more\n")
    code = run_cli(["--registry", str(env), "bisect", "D90", "--source", str(src), "--good", good, "--bad", bad,
                    "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"introduced by: {culprit[:12]} make it divergent" in out
    assert "  at it:        confirmed: 1/1 runs matched the signature" in out
    assert f"  at its parent {good[:12]} project: not-reproduced: " in out
    assert "source tree: untouched" in out
    header = next(ln for ln in out.splitlines() if ln.startswith("role"))
    assert header.split() == ["role", "commit", "verdict", "git", "configure", "s", "build", "s", "run", "s",
                              "total", "s", "reason"]


def fix_history(src: Path) -> list[str]:
    """1 broken (old end), 2 docs, 3 a refactor that does not build, 4 broken, 5 THE FIX, 6-9 docs (new end)."""
    shas = [git(src, "rev-parse", "HEAD")]
    shas.append(commit(src, "2: docs", README="docs\n"))
    shas.append(commit(src, "3: refactor (does not build)", kernel="divergent syntax error"))
    shas.append(commit(src, "4: refactor builds again", kernel="divergent"))
    shas.append(commit(src, "5: make the barrier uniform", kernel="uniform"))
    for n in (6, 7, 8, 9):
        shas.append(commit(src, f"{n}: more docs", README=f"docs {n}\n"))
    return shas


def test_fix_bisection_names_the_first_commit_where_the_defect_is_gone(tmp_path: Path, env: Path, capsys):
    src = new_project(tmp_path / "fixed", kernel="divergent")
    shas = fix_history(src)
    code = run_cli(bisect(env, src, shas[0], shas[8], "--fix", "--format", "json"))
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0, captured.err
    assert report["direction"] == "fix" and report["terms"] == ["broken", "fixed"]
    assert report["found"]["commit"] == shas[4] and report["found"]["verdict"] == "not-reproduced"
    assert report["found"]["subject"] == "5: make the barrier uniform"
    assert report["parent"]["commit"] == shas[3] and report["parent"]["verdict"] == "confirmed"
    assert "first_bad" not in report
    # in this direction the old end is confirmed (git: 0, "broken") and the new end not reproduced (1, "fixed")
    assert [(s["role"], s["verdict"], s["exit"]) for s in report["steps"][:2]] == [
        ("old end", "confirmed", GOOD), ("new end", "not-reproduced", BAD)]
    assert {s["commit"]: s["exit"] for s in report["steps"]}.get(shas[2], SKIP) == SKIP
    log = (Path(report["run_dir"]) / "bisect-log.txt").read_text()
    assert f"# fixed: [{shas[8]}] 9: more docs" in log and f"# broken: [{shas[0]}] project" in log
    assert f"# first fixed commit: [{shas[4]}] 5: make the barrier uniform" in log
    record = BisectRecord.from_dict(json.loads((Path(report["run_dir"]) / "run.json").read_text())["bisect"])
    assert record.direction is Direction.FIX and record.found.commit == shas[4]
    assert worktrees(src) == [str(src)] and scratch_dirs() == []


def test_fix_text_says_fixed_by(tmp_path: Path, env: Path, capsys):
    src = new_project(tmp_path / "fixed-text", kernel="divergent")
    old = git(src, "rev-parse", "HEAD")
    fix = commit(src, "make the barrier uniform", kernel="uniform")
    new = commit(src, "docs", README="more\n")
    code = run_cli(bisect(env, src, old, new, "--fix"))
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"kvdiag bisect D90 (fix: the first commit where it is not reproduced): old {old[:12]}")
    assert f"fixed by: {fix[:12]} make the barrier uniform" in out
    assert "  at it:        not-reproduced: " in out
    assert f"  at its parent {old[:12]} project: confirmed: 1/1 runs matched the signature" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("old end", "new end", "step"))]
    assert [(r[0] + " " + r[1] if r[0] != "step" else r[0], r[3 if r[0] != "step" else 2]) for r in rows] == [
        ("old end", "confirmed"), ("new end", "not-reproduced"), ("step", "not-reproduced")]


def test_ends_that_do_not_bracket_the_change_stop_before_bisecting(tmp_path: Path, env: Path, capsys):
    """--fix on a range whose new end is still broken: both verdicts named, git never started, exit 4."""
    src = new_project(tmp_path / "no-change", kernel="divergent")
    old = git(src, "rev-parse", "HEAD")
    commit(src, "docs", README="x\n")
    new = commit(src, "docs 2", README="y\n")
    code = run_cli(bisect(env, src, old, new, "--fix", "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 4
    assert report["ends_verified"] is False and report["found"] is None
    assert report["message"].startswith("the ends do not bracket a change: a fix bisection needs the old end "
                                        "confirmed and the new end not-reproduced, but the old end "
                                        f"{old[:12]} was confirmed (")
    assert f"new end {new[:12]} was confirmed" in report["message"]
    assert [s["role"] for s in report["steps"]] == ["old end", "new end"]
    assert (Path(report["run_dir"]) / "bisect-log.txt").read_text() == ""
    assert worktrees(src) == [str(src)]


def test_an_old_end_that_does_not_hold_stops_before_the_new_end_is_built(tmp_path: Path, env: Path, capsys):
    """The fork's f7832345b on the device: the old end failed to build (a header it still includes was
    removed); building the new end too would cost a full build and could not make the range usable."""
    src = new_project(tmp_path / "old-broken", kernel="uniform syntax error")
    old = git(src, "rev-parse", "HEAD")
    commit(src, "fix the build", kernel="uniform")
    new = commit(src, "split the barrier", kernel="divergent")
    code = run_cli(bisect(env, src, old, new, "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 4
    assert [(s["role"], s["verdict"]) for s in report["steps"]] == [("old end", "build-failed")]
    assert report["message"].startswith("the ends do not bracket a change: a cause bisection needs the old end "
                                        f"not-reproduced and the new end confirmed, but the old end {old[:12]} was "
                                        "build-failed (")
    assert report["message"].endswith(f"the new end {new[:12]} was not judged (no verdict there could make this "
                                      "range usable): nothing was bisected; give another old end")
    assert (Path(report["run_dir"]) / "bisect-log.txt").read_text() == ""
    assert worktrees(src) == [str(src)]


def test_only_skipped_commits_left_are_reported_as_a_range_never_blamed(tmp_path: Path, env: Path, capsys):
    """The fix lands inside commits that do not build: git can only say 'one of these'."""
    src = new_project(tmp_path / "ambiguous", kernel="divergent")
    old = git(src, "rev-parse", "HEAD")
    broken_a = commit(src, "a: refactor (does not build)", kernel="divergent syntax error")
    broken_b = commit(src, "b: the fix, still not building", kernel="uniform syntax error")
    new = commit(src, "c: builds again, fixed", kernel="uniform")
    code = run_cli(bisect(env, src, old, new, "--fix", "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 4
    assert report["found"] is None
    assert report["message"] == "only skipped commits are left: the first fixed commit is one of these 3"
    assert set(report["candidates"]) == {broken_a, broken_b, new}
    assert {s["commit"]: s["verdict"] for s in report["steps"] if s["role"] == "step"} == {
        broken_a: "build-failed", broken_b: "build-failed"}


def test_usage_errors_are_one_line(tmp_path: Path, env: Path, capsys):
    src = new_project(tmp_path / "usage", kernel="divergent")
    old = git(src, "rev-parse", "HEAD")
    new = commit(src, "fix", kernel="uniform")
    cases = [
        (["--fix", "--good", new, "--bad", old], "kvdiag: --fix takes --old and --new, not --good/--bad: "),
        (["--old", new, "--new", old], f"kvdiag: the old end {new[:12]} is not an ancestor of the new end "),
        (["--old", old], "kvdiag: missing --new: a bisection needs both ends"),
        (["--old", old, "--good", old, "--new", new], "kvdiag: give each end once: "),
    ]
    for args, start in cases:
        code = run_cli(["--registry", str(env), "bisect", "D90", "--source", str(src), *args,
                        "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 64, args
        assert len(err.splitlines()) == 1 and err.startswith(start), err
    assert worktrees(src) == [str(src)]


def test_a_range_of_one_commit_is_named_from_the_ends_alone(tmp_path: Path, env: Path, capsys):
    """NEW's parent is OLD: git names NEW at `bisect start`, no step runs besides the two ends."""
    src = new_project(tmp_path / "one", kernel="uniform")
    old = git(src, "rev-parse", "HEAD")
    new = commit(src, "split the barrier", kernel="divergent")
    code = run_cli(bisect(env, src, old, new, "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["found"]["commit"] == new and report["parent"]["commit"] == old
    assert [s["role"] for s in report["steps"]] == ["old end", "new end"]
    assert report["message"] == f"{new[:12]} is the first bad commit (the first commit where it is confirmed)"


def test_ccache_goes_in_front_of_the_compilers_of_a_cmake_configure_only():
    from kvdiag.workspace.scratch_build import BuildRecipe, with_launcher

    cmake = ["cmake", "-S", "s", "-B", "b", "-G", "Ninja"]
    assert with_launcher(cmake, "/usr/bin/ccache")[-3:] == [
        "-DCMAKE_C_COMPILER_LAUNCHER=/usr/bin/ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=/usr/bin/ccache",
        "-DCMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache"]
    assert with_launcher(cmake, None) == cmake
    mine = cmake + ["-DCMAKE_CUDA_COMPILER_LAUNCHER=sccache"]
    assert with_launcher(mine, "/usr/bin/ccache") == mine                  # the user's own launcher stays
    assert with_launcher(["python3", "configure.py", "b"], "/usr/bin/ccache") == ["python3", "configure.py", "b"]
    recipe = BuildRecipe(configure_cmd="cmake -S {source} -B {build}", build_cmd="ninja -C {build}",
                         launcher="/usr/bin/ccache")
    assert recipe.configure_argv(Path("/s"), Path("/b"))[-1] == "-DCMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache"
    assert recipe.build_argv(Path("/s"), Path("/b")) == ["ninja", "-C", "/b"]


def test_first_parent_judges_a_merge_as_one_commit_and_never_visits_its_side(tmp_path: Path, env: Path, capsys):
    """A fork's line merging upstream: the defect came in on the merged side; --first-parent blames the merge."""
    src = new_project(tmp_path / "merges", kernel="uniform")
    old = git(src, "rev-parse", "HEAD")
    git(src, "checkout", "-q", "-b", "upstream")
    commit(src, "upstream: docs", README="upstream docs\n")
    side = commit(src, "upstream: split the barrier", kernel="divergent")
    git(src, "checkout", "-q", "main")
    commit(src, "fork: notes", NOTES="fork\n")
    git(src, "merge", "-q", "--no-edit", "upstream")
    merge = git(src, "rev-parse", "HEAD")
    new = commit(src, "fork: more notes", NOTES="fork 2\n")
    code = run_cli(bisect(env, src, old, new, "--first-parent", "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["first_parent"] is True
    assert report["found"]["commit"] == merge
    assert side not in {s["commit"] for s in report["steps"]}
    code = run_cli(bisect(env, src, old, new, "--format", "json"))
    assert code == 0 and json.loads(capsys.readouterr().out)["found"]["commit"] == side


def test_a_step_that_dies_without_a_verdict_is_never_taken_as_git_took_it(tmp_path: Path, env: Path, capsys,
                                                                           monkeypatch):
    """git reads the dead step's exit 1 as "bad". Every mark in git's log must be a verdict a step recorded: here
    git alone marks commits 2 and 1 (docs changes, their kernel uniform) bad and names commit 1, with no evidence."""
    import kvdiag.engine.bisect.bisection as engine

    src = new_project(tmp_path / "history", kernel="uniform")
    shas = [git(src, "rev-parse", "HEAD")]
    shas.append(commit(src, "1: docs", README="docs 1\n"))
    shas.append(commit(src, "2: docs", README="docs 2\n"))
    shas.append(commit(src, "3: split the barrier", kernel="divergent"))
    shas.append(commit(src, "4: docs", README="docs 4\n"))
    scenarios = Path(__file__).resolve().parents[1] / "scenarios" / "bisect_steps"
    monkeypatch.setenv("PYTHONPATH", str(scenarios))
    monkeypatch.setattr(engine, "STEP_MODULE", "dies_before_judging_uniform_kernels")
    code = run_cli(bisect(env, src, shas[0], shas[-1], "--format", "json"))
    report = json.loads(capsys.readouterr().out)
    assert code == 70 and report["exit_code"] == 70
    assert report["found"] is None and report["candidates"] == [] and report["git_marks_recorded"] is False
    assert report["message"].startswith(f"git bisect took {shas[2][:12]} as bad, but no step recorded that verdict")
    log = (Path(report["run_dir"]) / "bisect-log.txt").read_text()
    assert f"git bisect bad {shas[2]}" in log and f"git bisect bad {shas[1]}" in log   # what git alone acted on
    assert BisectRecord.from_dict(report).exit_code == 70
    assert run_cli(bisect(env, src, shas[0], shas[-1])) == 70
    assert "no step recorded that verdict" in capsys.readouterr().out
