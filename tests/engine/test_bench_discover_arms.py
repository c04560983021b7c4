"""benchmarks/bench_discover.py's arm surroundings: `:cores-N` holds discover to N cores, `:blocking-sync`
preloads the shim and counts the processes that took its schedule, and every arm starts from a fresh home
that links the user's home but its runs (discover orders its queue by the runs' costs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_module import load_benchmark  # noqa: E402



@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_discover")


def test_setting_suffixes_are_no_discover_flags(bench):
    assert bench.arm_flags("auto:jobs-16:cores-8:blocking-sync") == ("auto", ["-j", "16"])
    assert bench.arm_settings("auto:jobs-16:cores-8:blocking-sync") == (8, True)
    assert bench.arm_settings("auto:jobs-16") == (None, False)
    with pytest.raises(SystemExit, match="unknown suffix 'cores-0'"):
        bench.arm_flags("auto:cores-0")


def test_first_cores_are_the_lowest_this_process_may_use(bench):
    allowed = sorted(os.sched_getaffinity(0))
    assert bench.first_cores(1) == {allowed[0]}
    assert bench.first_cores(10_000) == set(allowed)


def test_an_arms_home_links_every_entry_but_the_runs(bench, tmp_path):
    base = tmp_path / "home"
    (base / "runs" / "20261207-1-discover").mkdir(parents=True)
    (base / "probe-programs").mkdir()
    (base / "controls.json").write_text("{}")
    home = bench.arm_home(base, tmp_path / "arm")
    assert sorted(p.name for p in home.iterdir()) == ["controls.json", "probe-programs"]
    assert (home / "probe-programs").resolve() == (base / "probe-programs").resolve()
    assert bench.arm_home(tmp_path / "none", tmp_path / "arm2").is_dir()            # no home yet: an empty one


def test_an_arm_runs_discover_with_its_home_cores_and_shim(bench, tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("needs cc")
    seen = {}

    def fake_run(argv, **kwargs):
        seen.update(argv=argv, env=kwargs["env"], preexec=kwargs["preexec_fn"])
        saved = Path(argv[argv.index("--save") + 1])
        saved.write_text(json.dumps({"wall_s": 1.0, "totals": {}, "roots": []}))
        Path(kwargs["env"]["KVDIAG_BLOCKING_SYNC_LOG"]).write_text(
            "11 blocking-sync device=0 status=0\n12 blocking-sync device=0 status=0\n13 cuInit-failed device=-1 status=3\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    (tmp_path / "home" / "runs").mkdir(parents=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    shim = bench.build_shim(logs)                     # compiled for real, once; then discover is staged
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    row, _ = bench.run_discover(Path("B"), "racecheck", ["ADD"], "auto:jobs-4:cores-1:blocking-sync", logs,
                                home=tmp_path / "home")
    assert seen["argv"][:4] == [sys.executable, "-m", "kvdiag", "discover"] and "-j" in seen["argv"]
    assert Path(seen["env"]["KVDIAG_HOME"]) == logs / "home-auto-jobs-4-cores-1-blocking-sync"
    assert not (Path(seen["env"]["KVDIAG_HOME"]) / "runs").exists()
    assert seen["env"]["LD_PRELOAD"] == str(shim) and shim.exists()
    assert seen["preexec"] is not None and row["cores"] == 1
    assert row["blocking_sync"] == {"processes_set": 2, "notes": ["cuInit-failed device=-1 status=3"]}
    monkeypatch.undo()
    held = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                          preexec_fn=seen["preexec"], capture_output=True, text=True, timeout=60)
    assert held.stdout.strip() == str(sorted(bench.first_cores(1)))           # the child runs on that core only
