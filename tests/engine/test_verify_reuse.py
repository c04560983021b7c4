"""kvdiag verify --before RUN: a recorded run of a server entry (D3's shape) as the BEFORE arm.

CPU only: the synthetic project of git_projects, whose build also makes a stand-in
llama-server (tests/scenarios/git/project/fake_llama_server.py) that aborts mid-request
like D3 when its kernel.txt barrier is "divergent", and answers with accepted drafts
and a host KV buffer line once the fix probe made it uniform. D91 below is D3's step
on that server (kind server, $LLAMA_KV_MODEL, D3's expectations and signature).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from git_projects import (BUILD, CONFIGURE, PROBE, env, git, new_project, run_cli, scratch_dirs,  # noqa: F401
                          worktrees)
from kvdiag.workspace.scratch_build import substitute
from kvdiag.store.runs import RunDir, RunStore

ENTRY = """\
```toml
[defect]
id = "D91"
title = "Synthetic server abort in D3's shape"
summary = "The synthetic project's llama-server aborts mid-request with a CUDA illegal memory access when its barrier is divergent."
owner = "fork"
status = "open"
severity = "low"
reported = "2026-01-01"
modified = "2026-01-02"

[location]
component = "synthetic/server"
files = ["kernel.txt"]

[requires]
binaries = ["llama-server"]
gpu = false
env = ["LLAMA_KV_MODEL"]

[[repro]]
name = "server-mtp"
kind = "server"
default = true
description = "D3's step on the synthetic project's stand-in server: start it on the model, ask for a completion, watch for the abort."
argv = ["{{ bin['llama-server'] }}", "-m", "{{ env.LLAMA_KV_MODEL }}", "-fa", "on", "--spec-type", "draft-mtp",
        "-nkvo", "-ctk", "q8_0", "-ctv", "q8_0", "--seed", "{{ seed }}", "--lifetime", "20"]
timeout = 30
runs = 4
vars = { n_predict = 16, temperature = 0.0 }
expect = [
    '^.*\\b(?:CPU|CUDA_Host) +KV buffer size = ',
    'draft acceptance = [0-9.]+ \\( *[1-9][0-9]* accepted',
]

[[signature]]
type = "abort"
kind = "cuda-error"
message = "an illegal memory access was encountered"

[[signature]]
type = "output"
stream = "combined"
pattern = 'in function ggml_backend_cuda_synchronize\\b'
```

# D91 — synthetic D3
"""


class Project:
    """The user's checkout (D91's defect present), its build, the model $LLAMA_KV_MODEL names, the probes."""

    def __init__(self, tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch):
        (registry / "D91.md").write_text(ENTRY)
        self.registry = registry
        self.source = new_project(tmp_path / "src", kernel="divergent", server=True)
        self.build = self.make_build(tmp_path / "user-build")
        self.library = self.build / "bin" / "libggml-cuda.so"     # where llama.cpp puts its shared libraries
        self.library.write_bytes(b"\x7fELF a stand-in library")
        self.model = tmp_path / "models" / "seed-27b.gguf"
        self.model.parent.mkdir()
        self.model.write_bytes(b"GGUF" + bytes(60))
        monkeypatch.setenv("LLAMA_KV_MODEL", str(self.model))
        self.probes = tmp_path / "probes"
        self.probes.mkdir()
        (self.probes / "fix-uniform.patch").write_text(
            PROBE.format(name="fix-uniform", new="uniform", summary="Make the barrier uniform.")
            .replace("defect: D90", "defect: D91"))
        self.home = Path(os.environ["KVDIAG_HOME"])

    def make_build(self, build: Path) -> Path:
        for cmd in (CONFIGURE, BUILD):
            subprocess.run(substitute(cmd, {"source": str(self.source), "build": str(build)}), check=True,
                           capture_output=True)
        return build

    @property
    def store(self) -> RunStore:
        return RunStore(self.home)

    def record(self, *extra: str, entry: str = "D91") -> str:
        """`kvdiag run D91 --build B` (the seed arm); its run id."""
        run_cli(["--registry", str(self.registry), "run", entry, "--build", str(self.build), "--quiet", *extra])
        return [r for r in self.store.all_dirs() if r.label == entry][-1].run_id

    def verify(self, *extra: str) -> int:
        return run_cli(["--registry", str(self.registry), "verify", "D91", "--source", str(self.source),
                        "--probe", "fix-uniform", "--probes", str(self.probes), "--configure-cmd", CONFIGURE,
                        "--build-cmd", BUILD, "--quiet", *extra])

    def edit_registry(self, old: str, new: str) -> None:
        path = self.registry / "D91.md"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))

    def edit_run(self, run_id: str, change) -> None:
        """Rewrite a recorded run.json (as a run recorded by an older kvdiag would read)."""
        run = self.store.find(run_id)
        data = run.read()
        change(data)
        (run.path / "run.json").write_text(json.dumps(data))


@pytest.fixture
def p(tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    return Project(tmp_path, env, monkeypatch)


def d91_arms(p: Project) -> list[str | None]:
    """Each recorded D91 run's verify arm (None: a run of its own), oldest first."""
    return [(r.read().get("verify_arm") or {}).get("arm") for r in p.store.all_dirs() if r.label == "D91"]


# --------------------------------------------------------------------------- a server entry, both arms run


def test_a_server_entry_is_verified_end_to_end_with_both_arms_run(p: Project, capsys):
    code = p.verify("--build", str(p.build), "--runs", "4", "--format", "json")
    report = json.loads(capsys.readouterr().out)
    before, after = report["before"], report["after"]
    assert (before["verdict"], before["k"], before["n"], before["reused"]) == ("confirmed", 4, 4, None)
    assert (after["verdict"], after["k"], after["n"]) == ("not-reproduced", 0, 4)
    assert "the server answered 1/1 request(s)" in after["reason"]
    assert report["rates"]["p_value"] == pytest.approx(2 / 70, abs=1e-4) and report["rates"]["differ"] is True
    # D3's shape has no test-backend-ops step: results cannot be checked, and the report says so
    assert report["conclusion"] == "inconclusive" and code == 4
    assert report["explanation"].endswith("the entry has no test-backend-ops step to check them with")
    assert d91_arms(p) == ["before", "after"]
    for side in ("before", "after"):
        run = json.loads((Path(report[side]["run_dir"]) / "run.json").read_text())
        assert run["verify_arm"] == {"arm": side, "verify_run": Path(report["session_dir"]).name,
                                     "probes": ["fix-uniform"]}
        assert run["arm"]["inputs"]["LLAMA_KV_MODEL"]["file"]["size"] == 64
        assert run["arm"]["runs"] == 4
    files = json.loads((Path(report["before"]["run_dir"]) / "run.json").read_text())["arm"]["build"]["files"]
    assert sorted(files) == ["bin/libggml-cuda.so", "bin/llama-server"]
    assert files["bin/libggml-cuda.so"]["size"] == 23
    assert worktrees(p.source) == [str(p.source)]


# --------------------------------------------------------------------------- reuse accepted


def test_a_recorded_run_is_the_before_arm_and_after_runs_as_often(p: Project, capsys):
    from kvdiag.store.runs import id_time

    seed = p.record()
    capsys.readouterr()
    code = p.verify("--build", str(p.build), "--before", "latest", "--format", "json")
    report = json.loads(capsys.readouterr().out)
    before, after = report["before"], report["after"]
    assert before["reused"] == {"run_id": seed, "run_dir": str(p.store.find(seed).path), "started_at": id_time(seed),
                                "runs": 4, "kvdiag_version": before["reused"]["kvdiag_version"]}
    assert before["run_dir"] == str(p.store.find(seed).path)
    assert (before["verdict"], before["k"], before["n"]) == ("confirmed", 4, 4)
    assert (after["verdict"], after["k"], after["n"]) == ("not-reproduced", 0, 4)
    assert report["rates"]["differ"] is True and code == 4
    # BEFORE did not run again: the D91 runs are the seed run and verify's AFTER arm
    assert d91_arms(p) == [None, "after"]
    session = json.loads((Path(report["session_dir"]) / "run.json").read_text())
    assert session["before_run"] == seed and session["verify"]["before"]["reused"]["run_id"] == seed


def test_runs_applies_to_the_after_arm_and_the_text_names_the_reused_run(p: Project, capsys):
    seed = p.record()
    capsys.readouterr()
    code = p.verify("--build", str(p.build), "--before", seed[:22], "--runs", "2")
    out = capsys.readouterr().out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert rows["runs (k/N)"][-4:] == ["4/4", "(51%–100%)", "0/2", "(0%–66%)"]
    assert rows["verdict"][-2:] == ["confirmed", "not-reproduced"]
    assert f"before: reused run {seed} (recorded " in out and ", 4 run(s), the same arm: " in out
    assert "rates: before 4/4 runs (95% Wilson interval 51%–100%), after 0/2 runs (95% Wilson interval 0%–66%); " \
           "Fisher's exact test p = 0.0667: no difference shown" in out
    assert "conclusion: inconclusive" in out and "cannot tell the two rates apart" in out
    assert code == 4


def test_the_report_shows_the_verification_of_the_seed_run(p: Project, capsys):
    seed = p.record()
    p.verify("--build", str(p.build), "--before", "latest")
    capsys.readouterr()
    assert run_cli(["--registry", str(p.registry), "report", "D91"]) == 0
    text = capsys.readouterr().out
    # the report is of the seed run, never of the patched AFTER arm, and says what 4 runs rule out
    assert f"run `{seed}`" in text.split("\n---\n")[-1]
    assert "The defect showed in 4/4 runs (95% Wilson interval 51%–100%): the runs rule out a rate below 51%." in text
    section = text.split("## Fix verification\n\n")[1].split("\n---\n")[0]
    assert section.startswith("**inconclusive**: `kvdiag verify D91 --probe fix-uniform` on `")
    assert f"- before (the user's build; the recorded run `{seed}` (" in section and "reused, not run again)" in section
    assert "confirmed, 4/4 runs (95% Wilson interval 51%–100%): the runs rule out a rate below 51%" in section
    assert "- after (+ fix-uniform, a scratch build): not-reproduced, 0/4 runs (95% Wilson interval 0%–49%): " \
           "the runs rule out a rate above 49%" in section
    assert "- Fisher's exact test between the two rates: p = 0.0286, the rates differ." in section


def test_without_a_verification_the_report_says_none_is_recorded(p: Project, capsys):
    p.record("--runs", "1")
    capsys.readouterr()
    assert run_cli(["--registry", str(p.registry), "report", "D91"]) == 0
    assert "## Fix verification\n\nNo `kvdiag verify` of D91 is recorded in this run store." in capsys.readouterr().out


# --------------------------------------------------------------------------- reuse refused, one line each


def refused(p: Project, capsys, *args: str) -> str:
    """verify with --before: exit 64 with one line, no worktree made, no build started, no run added."""
    before = [r.run_id for r in p.store.all_dirs() if not r.label.startswith("target")]
    capsys.readouterr()
    code = p.verify(*args)
    err = capsys.readouterr().err.strip()
    assert code == 64, err
    assert len(err.splitlines()) == 1, err
    assert worktrees(p.source) == [str(p.source)] and scratch_dirs() == []
    assert [r.run_id for r in p.store.all_dirs() if not r.label.startswith("target")] == before
    return err


def _rewrite_model(p: Project, mp) -> None:
    p.model.write_bytes(b"GGUF" + bytes(100))


def _move_model(p: Project, mp) -> None:
    other = p.model.with_name("other.gguf")
    other.write_bytes(p.model.read_bytes())
    mp.setenv("LLAMA_KV_MODEL", str(other))


def _rebuild(p: Project, mp) -> None:
    server = p.build / "bin" / "llama-server"
    stamp = server.stat().st_mtime_ns
    p.make_build(p.build)
    if server.stat().st_mtime_ns == stamp:      # a coarse file-system clock: the rebuild still shows
        os.utime(server, ns=(stamp, stamp + 1_000_000_000))


def _relink(p: Project, mp) -> None:
    p.library.write_bytes(b"\x7fELF another stand-in library")


def _argv(p: Project, mp) -> None:
    p.edit_registry('"-fa", "on"', '"-fa", "off"')


def _signature(p: Project, mp) -> None:
    p.edit_registry('message = "an illegal memory access was encountered"', 'message = "illegal memory access"')


def _expect(p: Project, mp) -> None:
    p.edit_registry("'^.*\\b(?:CPU|CUDA_Host) +KV buffer size = ',", "'CPU KV buffer size = ',")


MISMATCHES = [
    ("model rewritten", _rewrite_model, (), "the file $LLAMA_KV_MODEL names changed ({model}: 64 bytes, modified "),
    ("another model", _move_model, (), "$LLAMA_KV_MODEL names another file ({model} then, "),
    ("rebuilt", _rebuild, (), "the build's files differ (rebuilt since?): bin/llama-server ("),
    ("library rebuilt", _relink, (), "the build's files differ (rebuilt since?): bin/libggml-cuda.so (23 bytes, "),
    ("argv template", _argv, (), "the repro step's argv differs in the registry"),
    ("signature", _signature, (), "the entry's signature differs in the registry"),
    ("expect", _expect, (), "the repro step's expect differs in the registry"),
    ("step variables", None, ("--set", "n_predict=8"), "the step variables differ (n_predict=8 then, none now)"),
]


@pytest.mark.parametrize("change, record_args, phrase", [m[1:] for m in MISMATCHES], ids=[m[0] for m in MISMATCHES])
def test_a_run_of_another_arm_is_refused_naming_what_differs(p: Project, capsys, monkeypatch, change, record_args,
                                                            phrase):
    seed = p.record("--runs", "1", *record_args)
    if change is not None:
        change(p, monkeypatch)
    err = refused(p, capsys, "--build", str(p.build), "--before", "latest")
    assert err.startswith(f"kvdiag: cannot reuse the BEFORE arm: run {seed} is not the arm verify would run now: ")
    assert phrase.format(model=p.model) in err


def test_a_run_on_another_build_is_refused(p: Project, capsys, tmp_path: Path):
    seed = p.record("--runs", "1")
    other = p.make_build(tmp_path / "other-build")
    err = refused(p, capsys, "--build", str(other), "--before", seed)
    assert err.endswith(f"the build differs ({p.build} then, {other} now)")


def test_an_interrupted_run_is_refused(p: Project, capsys, monkeypatch):
    from kvdiag.engine.verdict import execute

    real, calls = execute.attempt_step, []

    def second_is_interrupted(*args, **kwargs):        # Ctrl-C during the second server run
        calls.append(1)
        attempt = real(*args, **kwargs)
        if len(calls) == 2:
            raise execute.AttemptInterrupted(attempt)
        return attempt

    monkeypatch.setattr(execute, "attempt_step", second_is_interrupted)
    seed = p.record("--runs", "3")
    monkeypatch.setattr(execute, "attempt_step", real)
    assert p.store.find(seed).read()["status"] == "interrupted"
    err = refused(p, capsys, "--build", str(p.build), "--before", "latest")
    assert err == f"kvdiag: cannot reuse the BEFORE arm: run {seed} did not finish (status interrupted, in run 2 of 3)"


def test_a_run_whose_kvdiag_was_killed_is_refused(p: Project, capsys):
    seed = p.record("--runs", "1")

    def killed(data):                  # what a SIGKILLed kvdiag leaves: "running", its process gone, no outcome
        data.update(status="running", process={"pid": 2 ** 22 + 1, "boot_id": None, "start_ticks": 1})
        data.pop("outcome")
    p.edit_run(seed, killed)
    err = refused(p, capsys, "--build", str(p.build), "--before", "latest")
    assert err == f"kvdiag: cannot reuse the BEFORE arm: run {seed} did not finish (status abandoned)"


def test_a_run_that_made_fewer_runs_than_it_set_out_to_is_refused(p: Project, capsys, monkeypatch):
    monkeypatch.delenv("LLAMA_KV_MODEL")
    seed = p.record()               # skipped: no model named, no run made
    monkeypatch.setenv("LLAMA_KV_MODEL", str(p.model))
    err = refused(p, capsys, "--build", str(p.build), "--before", seed)
    assert err.startswith(f"kvdiag: cannot reuse the BEFORE arm: run {seed} ran 0 of its 4 runs (skipped: needs "
                          "$LLAMA_KV_MODEL")


def test_a_run_recorded_without_its_arm_is_refused(p: Project, capsys):
    seed = p.record("--runs", "1")
    p.edit_run(seed, lambda data: data.pop("arm"))
    err = refused(p, capsys, "--build", str(p.build), "--before", seed)
    assert err == (f"kvdiag: cannot reuse the BEFORE arm: run {seed} does not record its arm (build files, model, "
                   f"repro; made by kvdiag {json.loads((p.store.find(seed).path / 'run.json').read_text())['kvdiag_version']}"
                   "): run `kvdiag run D91` again to record one")


def test_a_run_of_another_entry_and_a_patched_after_arm_are_refused(p: Project, capsys):
    other = p.record("--runs", "1", entry="D90")
    err = refused(p, capsys, "--build", str(p.build), "--before", other)
    assert err == f"kvdiag: cannot reuse the BEFORE arm: run {other} is a run of 'D90', not a verdict run of D91"
    p.verify("--build", str(p.build), "--runs", "1")
    after = [r for r in p.store.all_dirs() if r.label == "D91"][-1].run_id
    err = refused(p, capsys, "--build", str(p.build), "--before", after)
    assert err == (f"kvdiag: cannot reuse the BEFORE arm: run {after} is the AFTER arm of a verify (a scratch build "
                   "with probes applied), not the user's build")


def test_before_needs_a_build_and_a_run_that_is_there(p: Project, capsys):
    err = refused(p, capsys, "--before", "latest")
    assert err == "kvdiag: --before needs --build: a recorded run is reused only against the build it ran on"
    err = refused(p, capsys, "--build", str(p.build), "--before", "latest")
    assert err.startswith("kvdiag: no recorded run of D91 in ") and err.endswith(
        "to reuse as the BEFORE arm: run `kvdiag run D91 --build BUILD` first, or leave out --before")
    err = refused(p, capsys, "--build", str(p.build), "--before", "20990101-nope")
    assert err.startswith("kvdiag: no run '20990101-nope' under ")


def test_the_real_d3_records_its_arm_and_a_run_that_ran_nothing_is_not_reused(tmp_path: Path, env: Path, capsys,
                                                                                monkeypatch):
    """D3 as the registry has it: a build whose llama-server offers no draft-mtp (and, on this machine,
    perhaps no GPU) ends before any server starts; the run still records D3's arm, and verify refuses
    to stand a run of 0 of 10 servers in for its BEFORE arm."""
    import sys

    from kvdiag import resources

    build = tmp_path / "fork-build"
    (build / "bin").mkdir(parents=True)
    server = build / "bin" / "llama-server"
    server.write_text(f"#!{sys.executable}\nprint('--spec-type none,draft-simple')\n")
    server.chmod(0o755)
    model = tmp_path / "seed-27b.gguf"
    model.write_bytes(b"GGUF" + bytes(28))
    monkeypatch.setenv("LLAMA_KV_MODEL", str(model))
    registry = str(resources.registry_dir())
    run_cli(["--registry", registry, "run", "D3", "--build", str(build), "--quiet"])
    store = RunStore(Path(os.environ["KVDIAG_HOME"]))
    (seed,) = [r for r in store.all_dirs() if r.label == "D3"]
    arm = seed.read()["arm"]
    assert (arm["entry"], arm["step"], arm["runs"]) == ("D3", "server-mtp", 10)
    assert arm["repro"]["step"]["argv"][:4] == ["{{ bin['llama-server'] }}", "-m", "{{ env.LLAMA_KV_MODEL }}", "-ngl"]
    assert arm["inputs"]["LLAMA_KV_MODEL"]["file"]["size"] == 32
    assert list(arm["build"]["files"]) == ["bin/llama-server"]
    capsys.readouterr()
    code = run_cli(["--registry", registry, "verify", "D3", "--source", str(tmp_path / "fork"), "--build", str(build),
                    "--probe", "D2-fix-uniform-barrier", "--before", "latest", "--quiet",
                    "--configure-cmd", "cmake -S {source} -B {build}", "--build-cmd", "cmake --build {build}"])
    err = capsys.readouterr().err.strip()
    assert code == 64 and len(err.splitlines()) == 1
    assert err.startswith(f"kvdiag: cannot reuse the BEFORE arm: run {seed.run_id} ran 0 of its 10 runs (")
