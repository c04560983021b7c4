"""Issue 28: user input is never "kvdiag failed" (70), and a run that cannot start leaves no run folder.

Found as a new user would: `history` with a non-UTF-8 id and `run --build` with a
non-UTF-8 path died with exit 70 (a UnicodeEncodeError deep inside); a history.sqlite
with a corrupted page in the middle died with 70 where a garbage header already gave
65; a `--build` that is a file or an empty folder gave the right 64 but left a
`*-target` run folder without run.json, which `runs` then listed as unreadable.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from faults_helpers import REPO, Faults, one_line

UTF8_REFUSAL = "is not valid UTF-8: kvdiag records ids and paths as UTF-8 text"


# --------------------------------------------------------------------------- 64: undecodable ids and paths

def test_history_with_a_non_utf8_id_is_64(kv: Faults):
    code, out, err = kv.cli("history", "\udcff\udcfe")          # the bytes ff fe, as Python hands them over
    assert code == 64 and out == ""
    assert one_line(err) == f"kvdiag: argument 2 (\\xff\\xfe) {UTF8_REFUSAL}; rename it or give another"


def test_run_with_a_non_utf8_build_path_is_64_as_a_real_process(kv: Faults):
    """The folder exists, with a build in it: only its name is the problem (it was exit 70)."""
    build = kv.build("throws_healthily.sh")
    named = os.fsencode(kv.root) + b"/build\xff"
    os.rename(build, named)
    done = subprocess.run([sys.executable, "-m", "kvdiag.cli", b"run", b"D12", b"--build", named, b"--no-staleness"],
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 64, err
    assert one_line(err).startswith("kvdiag: argument 4 (") and UTF8_REFUSAL in err
    assert "build\\xff" in err and kv.runs() == []


def test_a_non_utf8_llama_kv_build_is_64(kv: Faults, monkeypatch):
    monkeypatch.setenv("LLAMA_KV_BUILD", "/tmp/build\udcff")
    code, _, err = kv.cli("run", "D12")
    assert code == 64 and one_line(err).startswith(f"kvdiag: $LLAMA_KV_BUILD (/tmp/build\\xff) {UTF8_REFUSAL}")
    assert kv.runs() == []


# --------------------------------------------------------------------------- 65: a database corrupt mid-file

def _history_with_rows(kv: Faults, rows: int = 3000):
    from kvdiag.store.history import _database

    with _database(kv.home) as conn, conn:
        conn.executemany("INSERT INTO runs (entry_id, verdict, date, run_id, reason) VALUES (?, ?, ?, ?, ?)",
                         [("D12", "not-reproduced", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}", f"r{i}", "x" * 200)
                          for i in range(rows)])
    return kv.home / "history.sqlite"


def test_a_history_database_corrupt_in_its_middle_is_65_and_costs_a_sweep_nothing(kv: Faults):
    path = _history_with_rows(kv)
    data = bytearray(path.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle:middle + page] = bytes(range(256)) * (page // 256)      # a page of garbage, the header intact
    path.write_bytes(bytes(data))
    code, out, err = kv.cli("history", "D12")
    assert code == 65 and out == ""
    assert one_line(err) == (f"kvdiag: the history database {path} is damaged (database disk image is "
                             "malformed): move it aside (it is kept as it is) and kvdiag starts a new one")
    build = kv.build("throws_healthily.sh")
    code, out, err = kv.cli("sweep", "--only", "D12", "--build", build, "--no-staleness", "--quiet")
    assert code == 0 and "not-reproduced" in out, err      # recorded, or a warning if sqlite met the page
    assert "Traceback" not in err and all(ln.startswith("kvdiag: ") for ln in err.splitlines() if ln.strip())


# --------------------------------------------------------------------------- no run folder for a run that never started

@pytest.mark.parametrize("stage", ["a-file", "an-empty-folder"])
@pytest.mark.parametrize("command", ["run", "sweep", "scan", "drift"])
def test_a_build_that_is_no_build_is_64_and_leaves_no_run_folder(kv: Faults, stage, command):
    """(An unreadable --build is refused by click's own check of the option, before any of kvdiag's.)"""
    build = kv.root / "build"
    if stage == "a-file":
        build.write_text("not a build")
        message = f"build folder {build} is not a folder"
    else:
        build.mkdir()
        message = f"{build} is not a build directory: no CMakeCache.txt and no executables"
    args = {"run": ["run", "D12"], "sweep": ["sweep", "--only", "D12", "--quiet"], "scan": ["scan", "D2"],
            "drift": ["drift", "--op", "FLASH_ATTN_EXT", "--params", "hsk=64"]}[command]
    code, _, err = kv.cli(*args, "--build", build)
    assert code == 64 and message in one_line(err), err
    assert kv.runs() == []
    code, out, _ = kv.cli("runs")
    assert code == 0 and "unreadable" not in out
