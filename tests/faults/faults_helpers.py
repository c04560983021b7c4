"""Helpers of the fault-injection suite: fake builds named by what they stage, the CLI in
process or as a real process (for signals), and the checks every scenario makes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from process_checks import pid_gone, wait_until

HERE = Path(__file__).resolve().parent
BUILDS = HERE / "builds"
REPO = HERE.parents[1]
REGISTRY = REPO / "registry"


class Faults:
    """One scenario's world: tmp folder, home, and ways to run kvdiag against it."""

    def __init__(self, root: Path, capsys):
        self.root = root
        self.home = root / "home"
        self.capsys = capsys

    # ------------------------------------------------------------------ builds
    def build(self, script: str | None, name: str = "build") -> Path:
        """A build folder: CMakeCache.txt and bin/test-backend-ops = builds/<script>."""
        build = self.root / name
        (build / "bin").mkdir(parents=True)
        (build / "CMakeCache.txt").write_text("CMAKE_BUILD_TYPE:STRING=Release\nGGML_CUDA:BOOL=ON\n")
        if script is not None:
            exe = build / "bin" / "test-backend-ops"
            shutil.copyfile(BUILDS / script, exe)
            exe.chmod(0o755)
        return build

    def registry_copy(self, *ids: str) -> Path:
        """A scratch registry holding copies of these entries."""
        reg = self.root / "registry"
        reg.mkdir(exist_ok=True)
        for entry_id in ids:
            shutil.copyfile(REGISTRY / f"{entry_id}.md", reg / f"{entry_id}.md")
        return reg

    # ------------------------------------------------------------------ the CLI
    def cli(self, *args: str) -> tuple[int, str, str]:
        """kvdiag in this process: (exit code, stdout, stderr)."""
        from kvdiag.cli import main

        self.capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = self.capsys.readouterr()
        return code, out, err

    def one_gpu(self) -> dict[str, str]:
        """The environment of a host with one H200 as nvidia-smi shows it (no GPU is used)."""
        bindir = self.root / "smi-bin"
        bindir.mkdir(exist_ok=True)
        smi = bindir / "nvidia-smi"
        shutil.copyfile(BUILDS / "nvidia_smi_lists_one_h200.sh", smi)
        smi.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        return {**env, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """kvdiag as a real process (its own signal handling installed), output to files."""
        env = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO)}
        self.out_path, self.err_path = self.root / "kvdiag.out", self.root / "kvdiag.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            return subprocess.Popen([sys.executable, "-m", "kvdiag.cli", *map(str, args)], env=env,
                                    cwd=self.root, stdout=out, stderr=err)

    def stderr_of_spawned(self) -> str:
        return self.err_path.read_text(errors="replace")

    # ------------------------------------------------------------------ what is on disk
    def runs(self, label: str | None = None) -> list[Path]:
        from kvdiag.store.runs import RunStore

        return [r.path for r in RunStore(self.home).all_dirs() if label is None or r.label == label]

    def run_json(self, label: str) -> dict:
        runs = self.runs(label)
        assert runs, f"no run labelled {label} under {self.home}"
        return json.loads((runs[-1] / "run.json").read_text())


def one_line(err: str) -> str:
    """The single `kvdiag: ...` line a failure prints (and assert it is one line, no traceback)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    failures = [ln for ln in lines if ln.startswith("kvdiag: ") and "inspecting" not in ln and "] run " not in ln]
    assert len(failures) >= 1, err
    return failures[-1]


def pids_of(build: Path, timeout: float = 30.0) -> list[int]:
    """The pids the stand-in wrote to <build>/pids once its step started."""
    path = build / "pids"
    assert wait_until(path.exists, timeout=timeout), "the stand-in never started"
    return [int(p) for p in path.read_text().split()]


def assert_all_gone(pids, within: float = 5.0) -> None:
    for pid in pids:
        assert pid_gone(pid, within=within), f"pid {pid} outlived kvdiag"


def signal_when_started(proc: subprocess.Popen, build: Path, sig: int) -> tuple[list[int], int]:
    """Wait for the stand-in to start, send `sig` to kvdiag, return (stand-in pids, kvdiag's exit)."""
    try:
        pids = pids_of(build)
        time.sleep(0.2)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return pids, code


__all__ = ["Faults", "assert_all_gone", "one_line", "pids_of", "signal", "signal_when_started"]
