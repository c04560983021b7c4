"""`kvdiag bisect --resume RUN` on the synthetic git project (CPU only, real `git bisect run`): a bisection cut
short on one machine continues on another, taking only the steps that still hold there."""

from __future__ import annotations

import json
from pathlib import Path

from git_projects import BUILD, CONFIGURE, PY, commit, env, git, new_project, run_cli  # noqa: F401
from kvdiag.records.bisect import GOOD, SKIP


def bisect(env: Path, src: Path, old: str, new: str, *extra: str, configure: str = CONFIGURE) -> list[str]:
    return ["--registry", str(env), "bisect", "D90", "--source", str(src), "--old", old, "--new", new,
            "--configure-cmd", configure, "--build-cmd", BUILD, "--quiet", "--format", "json", *extra]


def history(tmp_path: Path) -> tuple[Path, list[str]]:
    src = new_project(tmp_path / "history", kernel="uniform")                           # 0 good
    shas = [git(src, "rev-parse", "HEAD")]
    shas.append(commit(src, "1: refactor (does not build)", kernel="uniform syntax error"))
    shas.append(commit(src, "2: refactor fixed", kernel="uniform"))                     # good
    shas.append(commit(src, "3: split the barrier", kernel="divergent"))                # the culprit
    for n in (4, 5, 6):
        shas.append(commit(src, f"{n}: docs", README=f"docs {n}\n"))
    return src, shas


def cut_short(report: dict, keep: int) -> str:
    """The first bisection as a machine that went away mid-way leaves it: its first ``keep`` steps recorded,
    its run.json still "running" (the process that wrote it is gone)."""
    run_dir = Path(report["run_dir"])
    steps = json.loads((run_dir / "bisect-steps.json").read_text())
    (run_dir / "bisect-steps.json").write_text(json.dumps(steps[:keep]))
    (run_dir / "run.json").write_text(json.dumps({"entry": "D90-bisect", "kind": "bisect", "status": "running",
                                                  "process": {"pid": 1, "boot_id": "another-machine"}}))
    return run_dir.name


def test_a_bisection_cut_short_continues_from_its_record_and_finds_the_same_commit(tmp_path: Path, env: Path,
                                                                                    capsys):
    src, shas = history(tmp_path)
    assert run_cli(bisect(env, src, shas[0], shas[-1])) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["found"]["commit"] == shas[3]
    judged = {s["commit"]: s for s in first["steps"]}
    earlier = cut_short(first, keep=len(first["steps"]) - 1)      # the last step of the first bisection is lost
    kept = json.loads((Path(first["run_dir"]) / "bisect-steps.json").read_text())

    code = run_cli(bisect(env, src, shas[0], shas[-1], "--resume", earlier))
    second = json.loads(capsys.readouterr().out)
    assert code == 0 and second["found"]["commit"] == shas[3] and second["resumed_from"] == earlier
    by_commit = {s["commit"]: s for s in second["steps"]}
    decided = [s["commit"] for s in kept if s["exit"] != SKIP]
    for sha in decided:                    # every decided step of the record is taken, with its own evidence
        assert by_commit[sha]["reused_from"] == earlier
        assert by_commit[sha]["run_dir"] == judged[sha]["run_dir"]
        assert by_commit[sha]["verdict"] == judged[sha]["verdict"]
    assert second["steps"][0]["role"] == "old end" and second["steps"][0]["exit"] == GOOD
    for step in second["steps"]:           # what the record did not decide was built and run here
        if step["commit"] not in decided:
            assert "reused_from" not in step
            assert step["verdict"] == "build-failed" or step["run_s"] is not None
    resume = json.loads((Path(second["run_dir"]) / "resume.json").read_text())
    assert resume["from"] == earlier and resume["status"] == "abandoned"
    assert set(resume["steps"]) == set(decided)
    skips = {p["commit"]: p["why"] for p in resume["passed_over"]}
    for s in kept:
        if s["exit"] == SKIP:              # a build that failed there is built again, never taken
            assert skips[s["commit"]] == f"{s['verdict']} is not a verdict this direction decides on; judged again"

    assert run_cli(["--registry", str(env), "bisect", "D90", "--source", str(src), "--old", shas[0], "--new",
                    shas[-1], "--configure-cmd", CONFIGURE, "--build-cmd", BUILD, "--quiet", "--resume",
                    earlier]) == 0
    text = capsys.readouterr().out
    assert "old end (taken)" in text
    assert f"commit(s) taken from run {earlier}, judged there in " in text


def test_steps_built_with_other_commands_are_built_again(tmp_path: Path, env: Path, capsys):
    src, shas = history(tmp_path)
    assert run_cli(bisect(env, src, shas[0], shas[-1])) == 0
    earlier = Path(json.loads(capsys.readouterr().out)["run_dir"]).name
    other = f"{PY} -B {{source}}/configure.py {{build}}"       # another configure: what it builds may differ
    assert run_cli(bisect(env, src, shas[0], shas[-1], "--resume", earlier, configure=other)) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["found"]["commit"] == shas[3]
    assert not any("reused_from" in s for s in second["steps"])
    resume = json.loads((Path(second["run_dir"]) / "resume.json").read_text())
    assert resume["steps"] == {}
    assert all(p["why"].startswith("its configure command differs: ") or "not a verdict" in p["why"]
               for p in resume["passed_over"])


def test_a_job_count_or_compiler_launcher_does_not_make_commands_differ():
    from kvdiag.engine.bisect.resume import comparable_argv

    src, build = Path("/s/src"), Path("/s/build")
    here, there = (Path("/t/src"), Path("/t/build")), (src, build)
    recorded = comparable_argv(["ninja", "-C", "/s/build", "-j", "16", "test-backend-ops"], *there)
    assert recorded == ("ninja", "-C", "{build}", "-j", "{jobs}", "test-backend-ops")
    assert comparable_argv(["ninja", "-C", "/t/build", "-j", "8", "test-backend-ops"], *here) == recorded
    assert comparable_argv(["ninja", "-C", "/t/build", "-j8", "test-backend-ops"], *here)[2:] == (
        "{build}", "-j{jobs}", "test-backend-ops")
    assert comparable_argv(["ninja", "-C", "/t/build", "-j", "8", "llama-server"], *here) != recorded
    configure = ["cmake", "-S", "/s/src", "-B", "/s/build", "-DGGML_CUDA=ON"]
    assert comparable_argv(configure + ["-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache",
                                        "-DCMAKE_CXX_COMPILER_LAUNCHER:STRING=ccache"], src, build) == \
        comparable_argv(configure, src, build) == ("cmake", "-S", "{source}", "-B", "{build}", "-DGGML_CUDA=ON")
    assert comparable_argv(configure + ["-DCMAKE_CUDA_FLAGS=-lineinfo"], src, build) != \
        comparable_argv(configure, src, build)


def test_resume_from_a_run_that_is_not_a_bisection_of_the_entry_is_one_line(tmp_path: Path, env: Path, capsys):
    src, shas = history(tmp_path)
    assert run_cli(bisect(env, src, shas[2], shas[3])) == 0
    first = json.loads(capsys.readouterr().out)
    step_run = Path(first["steps"][0]["run_dir"]).name              # a D90 run, not a bisection
    assert run_cli(bisect(env, src, shas[0], shas[-1], "--resume", step_run)) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kvdiag: --resume {step_run}: run {step_run} is not a bisection of D90 (it is D90)"]
    assert run_cli(bisect(env, src, shas[0], shas[-1], "--resume", "no-such-run")) == 64
    assert capsys.readouterr().err.strip().startswith("kvdiag: no run 'no-such-run' under ")
