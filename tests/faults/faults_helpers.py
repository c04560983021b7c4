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

from process_checks import ended_and_reaped, pid_gone, wait_until

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
    """Wait for the stand-in to start, send `sig` to kvdiag, return (stand-in pids, kvdiag's exit).

    When kvdiag has to be killed here, its stand-ins are ended and reaped too: they are re-parented
    to this pytest process (a subreaper since an earlier test ran kvdiag's runner in it), and a
    zombie left behind would fail every later test that counts zombies, not just this one."""
    pids: list[int] = []
    try:
        pids = pids_of(build)
        time.sleep(0.2)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            _end_and_reap(pids)
    return pids, code


def _end_and_reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        wait_until(lambda: ended_and_reaped(pid), timeout=5.0)


__all__ = ["Faults", "assert_all_gone", "one_line", "pids_of", "signal", "signal_when_started"]


# --------------------------------------------------------------------------- issue 28: GPU tools, projects, stores

SCENARIOS = REPO / "tests" / "scenarios"


def fake_gpu_toolchain(kv: Faults, sanitizer_mode: str) -> tuple[dict[str, str], Path]:
    """(environment, compute-sanitizer) of a host with one H200, an nvcc that "compiles"
    anything (tests/controls/fake_nvcc.py) and the tests' one fake compute-sanitizer in
    ``sanitizer_mode`` (tests/scenarios/fake_compute_sanitizer.py; `hangs` writes its pids to
    ``<sanitizer's folder>/pids``, one line per run)."""
    env = kv.one_gpu()
    nvcc = kv.root / "smi-bin" / "nvcc"
    shutil.copyfile(REPO / "tests" / "controls" / "fake_nvcc.py", nvcc)
    nvcc.chmod(0o755)
    folder = kv.root / "sanitizer"
    folder.mkdir(exist_ok=True)
    sanitizer = folder / "compute-sanitizer"
    shutil.copyfile(SCENARIOS / "fake_compute_sanitizer.py", sanitizer)
    sanitizer.chmod(0o755)
    (folder / "compute-sanitizer.mode").write_text(sanitizer_mode)
    return env, sanitizer


def started_runs(folder: Path) -> int:
    """How many runs of a stand-in wrote their line to ``folder/pids`` (0 when none did)."""
    path = folder / "pids"
    return len(path.read_text().splitlines()) if path.exists() else 0


def no_run_left_open(kv: Faults) -> list[str]:
    """Every run folder's run.json and its status: none may be missing or still "running"."""
    seen = []
    for run in kv.runs():
        path = run / "run.json"
        assert path.is_file(), f"{run.name} has no run.json"
        status = json.loads(path.read_text())["status"]
        assert status != "running", f"{run.name} is still running"
        seen.append(f"{run.name}: {status}")
    return seen


__all__ += ["fake_gpu_toolchain", "no_run_left_open", "started_runs"]


def spawn_with_file_limit(kv: Faults, limit: int, *args: str) -> subprocess.Popen:
    """kvdiag as a real process (like `Faults.spawn`) whose files may not grow past ``limit``
    bytes (RLIMIT_FSIZE): every write past it is refused with EFBIG, as a full disk refuses
    one with ENOSPC (Python ignores SIGXFSZ). Staged this way on any machine and for any
    user; the stand-ins kvdiag runs write to pipes, not files, and are not limited by it."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    kv.out_path, kv.err_path = kv.root / "kvdiag.out", kv.root / "kvdiag.err"
    with open(kv.out_path, "wb") as out, open(kv.err_path, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "kvdiag.cli", *map(str, args)], env=env, cwd=kv.root,
                                stdout=out, stderr=err, preexec_fn=limited)


def small_tmpfs(folder: Path, size: str = "300k") -> bool:
    """Mount a tmpfs of ``size`` on ``folder`` (a full disk, for real); False where mounting is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], capture_output=True, timeout=30)


__all__ += ["small_tmpfs", "spawn_with_file_limit", "unmount"]
