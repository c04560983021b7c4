"""Issue 43, rows C to F: out-of-range input refused with 64 or 65 and one line, real input that
kvdiag had to change said as changed, and no advice that loses data.

Each scenario is a row of the probe that found it, re-run as written there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from faults_helpers import REGISTRY, REPO, Faults, one_line, spawn_with_file_limit
from kvdiag.registry.radius import MAX_RADIUS_ITEMS

UPSTREAM = "749f688fcaa4c472ec034b08cb8a907c45cfaa02"
REPO_URL = "https://github.com/ggml-org/llama.cpp"


# --------------------------------------------------------------------------- C: shards

@pytest.mark.parametrize("environ, line", [
    ({"SLURM_ARRAY_TASK_ID": "99999999999999999999998", "SLURM_ARRAY_TASK_COUNT": "99999999999999999999999"},
     "kvdiag: --shard auto: SLURM_ARRAY_TASK_ID=99999999999999999999998 is out of range (at most 12 digits)"),
    ({"SLURM_ARRAY_TASK_ID": "999998", "SLURM_ARRAY_TASK_COUNT": "999999"},
     "kvdiag: --shard auto: SLURM_ARRAY_TASK_ID=999998, SLURM_ARRAY_TASK_COUNT=999999 gives 999999 shards, "
     "out of range (at most 100000)"),
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_STEP": "0"},
     "kvdiag: --shard auto: SLURM_ARRAY_TASK_STEP=0: an array's ids step by 1 or more"),
    ({"SLURM_ARRAY_TASK_ID": "\u0662", "SLURM_ARRAY_TASK_COUNT": "4"},
     "kvdiag: --shard auto: SLURM_ARRAY_TASK_ID='\u0662' is not a whole number (digits 0-9)"),
], ids=["id-and-count-of-23-digits", "a-million-shards", "step-0", "arabic-indic-digit"])
def test_a_shard_out_of_range_is_refused_before_the_sweep(kv: Faults, monkeypatch, environ, line):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code, out, err = kv.cli("sweep", "--build", kv.build("throws_healthily.sh"), "--shard", "auto",
                            "--no-staleness")
    assert (code, out) == (64, "") and err.strip() == line, (code, out, err)
    assert kv.runs() == []


@pytest.mark.parametrize("shard", ["1/\u0664", "1/100001", "1/9999999999999999999999"])
def test_a_typed_shard_out_of_range_is_refused(kv: Faults, shard):
    code, out, err = kv.cli("sweep", "--build", kv.build("throws_healthily.sh"), "--shard", shard)
    assert code == 64 and out == "" and one_line(err).startswith("kvdiag: ") and shard in one_line(err)
    assert kv.runs() == []


# --------------------------------------------------------------------------- D: registry radius

def _scan(kv: Faults, cases: dict, kernels: int = 1) -> str:
    scan = {"scan": {"op": "FLASH_ATTN_EXT", "params": "hsk=256", "cases": cases,
                     "kernels": {"affected": [{"instantiation": f"flash_attn_ext_f16<{i}>", "level": "kernel"}
                                              for i in range(kernels)]}},
            "target": {"build": {"git": {"commit": UPSTREAM}}}}
    path = kv.root / "scan.json"
    path.write_text(json.dumps(scan))
    return str(path)


@pytest.mark.parametrize("key", ['hsk=256,nb="1"', "hsk=256,nb=1\nx", "hsk=256,nb=\\1", "hsk=256,nb=1\x00"],
                         ids=["double-quote", "newline", "backslash", "nul"])
def test_a_radius_from_case_keys_no_case_has_is_65_not_an_internal_failure(kv: Faults, key):
    registry = kv.registry_copy("D2")
    before = (registry / "D2.md").read_bytes()
    scan = _scan(kv, {key: {"verdict": "confirmed"}})
    code, out, err = kv.cli("--registry", registry, "registry", "radius", "D2", "--from", scan, "--repo", REPO_URL)
    assert code == 65 and "is not a test-backend-ops case" in one_line(err), (code, err)
    assert "internal failure" not in err and (registry / "D2.md").read_bytes() == before


def test_a_radius_of_a_huge_scan_is_capped_and_says_what_it_folded(kv: Faults):
    registry = kv.registry_copy(*(p.stem for p in REGISTRY.glob("D*.md")))
    cases = {f"hsk=256,nb={i}": {"verdict": "confirmed"} for i in range(3)}
    scan = _scan(kv, cases, kernels=20_000)
    code, out, err = kv.cli("--registry", registry, "registry", "radius", "D2", "--from", scan, "--repo", REPO_URL)
    assert code == 0, err
    assert f"'kernels: 20000 measured, the first {MAX_RADIUS_ITEMS} kept'" in out
    text = (registry / "D2.md").read_text()
    assert len(text) < 200_000 and text.count("flash_attn_ext_f16<") <= MAX_RADIUS_ITEMS + 100
    code, _, err = kv.cli("--registry", registry, "registry", "lint")
    assert code == 0, err


def test_lint_refuses_a_radius_list_past_the_cap(kv: Faults):
    registry = kv.registry_copy(*(p.stem for p in REGISTRY.glob("D*.md")))
    path = registry / "D2.md"
    many = "".join(f"    'k<{i}>',\n" for i in range(MAX_RADIUS_ITEMS + 1))
    text = path.read_text()
    at = text.index("[[radius]]")
    path.write_text(text[:at] + "[[radius]]\nrepo = '" + REPO_URL + "'\ncommit = '" + UPSTREAM[:12] + "'\n"
                    "measured = 2026-12-01\nkvdiag = '0.1.1'\nop = 'FLASH_ATTN_EXT'\nscanned = 'hsk=256'\n"
                    "params = ['hsk=256']\nkernels = [\n" + many + "]\n\n" + text[at:])
    code, out, err = kv.cli("--registry", registry, "registry", "lint")
    assert code == 65 and f"{MAX_RADIUS_ITEMS + 1} items, more than {MAX_RADIUS_ITEMS}" in out + err


def test_radius_through_a_symlinked_entry_says_so_as_render_does(kv: Faults):
    registry = kv.registry_copy("D2")
    real = kv.root / "elsewhere" / "D2.md"
    real.parent.mkdir()
    shutil.move(registry / "D2.md", real)
    (registry / "D2.md").symlink_to(real)
    scan = _scan(kv, {"hsk=256,nb=1": {"verdict": "confirmed"}})
    code, _, err = kv.cli("--registry", registry, "registry", "radius", "D2", "--from", scan, "--repo", REPO_URL)
    assert code == 0, err
    assert f"into {real} (through symlink {registry / 'D2.md'})" in err
    assert (registry / "D2.md").is_symlink() and "[[radius]]" in real.read_text()


# --------------------------------------------------------------------------- E: slots and history

@pytest.mark.parametrize("value", ["abc", "0", "65", "\u0663", "9" * 5000])
@pytest.mark.parametrize("command", ["sweep", "run"])
def test_a_bad_slot_setting_is_64_before_anything_runs_on_any_host(kv: Faults, monkeypatch, command, value):
    monkeypatch.setenv("KVDIAG_GPU_SLOTS", value)
    build = kv.build("throws_healthily.sh")
    args = ["sweep", "--only", "D12"] if command == "sweep" else ["run", "D12"]
    code, out, err = kv.cli(*args, "--build", build, "--no-staleness")
    assert code == 64 and out == "", (code, out, err)
    assert one_line(err).startswith("kvdiag: $KVDIAG_GPU_SLOTS must be a whole number from 1 to 64, got ")
    assert kv.runs() == []


def _home_with_a_run(kv: Faults) -> None:
    code, _, err = kv.cli("run", "D12", "--build", kv.build("throws_healthily.sh"), "--no-staleness")
    assert code == 0, err
    (kv.home / "history.sqlite").unlink()       # the run is in the run store, not yet in the history


def test_history_on_a_full_disk_is_70_and_advises_freeing_space_not_moving_it(kv: Faults):
    _home_with_a_run(kv)
    proc = spawn_with_file_limit(kv, 4096, "history", "D12")
    code = proc.wait(timeout=60)
    err = kv.stderr_of_spawned()
    assert code == 70, err
    line = one_line(err)
    assert "free space on its disk" in line and "move it aside" not in line and "the history is left" in line
    code, out, err = kv.cli("history", "D12")     # with room again, nothing was lost
    assert code == 0 and "D12" not in err and "inconclusive" in out or "not-reproduced" in out, (out, err)


def test_a_run_says_when_its_verdict_could_not_join_a_damaged_history(kv: Faults):
    kv.home.mkdir(parents=True)
    (kv.home / "history.sqlite").write_bytes(b"this is not a database" * 100)
    code, out, err = kv.cli("run", "D12", "--build", kv.build("throws_healthily.sh"), "--no-staleness")
    assert code == 0 and "D12 NOT-REPRODUCED" in out
    assert ("kvdiag: warning: the verdict is saved in the run store but not recorded in the history: the "
            f"history database {kv.home / 'history.sqlite'} is damaged") in err
    assert "move it aside (it is kept as it is)" in err


# --------------------------------------------------------------------------- F: smaller ones

def test_an_output_into_missing_folders_says_which_folder_it_made(kv: Faults):
    sweep = kv.root / "s.json"
    code, _, err = kv.cli("sweep", "--only", "D12", "--build", kv.build("throws_healthily.sh"), "--no-staleness",
                          "--save", sweep, "--quiet")
    assert code == 0, err
    out_path = kv.root / "newdir" / "sub" / "x.json"
    code, _, err = kv.cli("render", sweep, "--format", "json", "-o", out_path)
    assert code == 0 and f"kvdiag: wrote {out_path} (made folder {kv.root / 'newdir'})" in err, err


def test_synth_through_a_symlink_says_so_as_render_does(kv: Faults):
    real = kv.root / "models" / "real.gguf"
    real.parent.mkdir()
    real.write_bytes(b"")
    link = kv.root / "tiny.gguf"
    link.symlink_to(real)
    code, out, err = kv.cli("model", "synth", "--head-dim", "64", "--n-head", "2", "--n-head-kv", "2",
                            "--n-layer", "1", "--n-embd", "128", "--n-ff", "128", "-o", link)
    assert code == 0, err
    assert out.startswith(f"wrote {real} (through symlink {link})") and link.is_symlink() and real.stat().st_size


def test_drift_refuses_a_params_that_is_no_regex(kv: Faults):
    code, out, err = kv.cli("drift", "--build", kv.build("throws_healthily.sh"), "--op", "FLASH_ATTN_EXT",
                            "--params", "(")
    assert code == 64 and out == ""
    assert one_line(err).startswith("kvdiag: --params '(': not a regular expression (")


@pytest.mark.parametrize("args", [["run", "--no-such-option"], ["--no-such-option"], ["frob"],
                                  ["run", "--timeout"]])
def test_a_click_usage_error_is_one_line(kv: Faults, args):
    code, out, err = kv.cli(*args)
    assert code == 64 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("kvdiag: "), err
    assert "--help" in err


def test_synth_on_a_small_disk_says_its_sizes_in_mib(kv: Faults, monkeypatch):
    from kvdiag.model import synth

    class Usage:
        free = 50 * 2**20

    monkeypatch.setattr(synth.shutil, "disk_usage", lambda path: Usage)
    code, out, err = kv.cli("model", "synth", "--head-dim", "64", "--n-head", "2", "--n-head-kv", "2",
                            "--n-layer", "1", "--n-embd", "128", "--n-ff", "128", "-o", kv.root / "m.gguf")
    assert code == 64, (out, err)
    line = one_line(err)
    assert "0.0 GiB" not in line and line.endswith("has 50.0 MiB free") and "needs about 64." in line


def test_the_worktree_ctrl_c_scenario_passes_with_sigint_ignored(kv: Faults):
    """The scenario of tests/probes/test_worktree.py, under a runner that started with SIGINT ignored."""
    script = ("import signal, subprocess, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "sys.exit(subprocess.call([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', "
              "'tests/probes/test_worktree.py', '-k', 'ctrl_c']))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
