"""Benchmark: does one machine scale with more sanitized processes at once, and what binds it?

Discovery runs a pool of sanitized test-backend-ops processes on one GPU (docs/performance.md).
Whether more of them at a time help depends on what binds a process when it has company: the
host's cores, or the GPU, whose contexts from different processes take turns (time slicing,
without MPS). This starts the same command 1, then N copies at once, and for each count reports:

- ``wall_s``: until the last copy ended; ``speedup``: copies × the single copy's wall / this wall
  (N when nothing is shared, 1 when the copies run one after the other in effect);
- ``cpu_s``: the copies' user and system time (the processes waited for, the sanitized program
  included); ``cores_busy``: the host's busy cores on average over the wall (``/proc/stat``);
- ``gpu_util``: nvidia-smi's utilization.gpu on average (the share of time some kernel ran, not
  how many SMs) and ``gpu_mem_mib``: the most memory used.

    python3 benchmarks/bench_concurrency.py --copies 1,4,9,16 --cap 300 --out c.json -- \\
        compute-sanitizer --tool racecheck B/bin/test-backend-ops test -b CUDA0 -o TOP_K -p 'ne=\\[65547,'

If the single copy's ``cores_busy`` times N exceeds the host's cores, the host binds; if the
speedup stays low while cores are idle, something shared on the GPU does. The counts run one
after the other, never two at once. Compare only numbers from one run (docs/performance.md).

``--arms contexts,mps`` runs the counts twice: as separate CUDA contexts (the default), then with an
MPS control daemon of this run only, which lets kernels of several processes run on the GPU at once.
The daemon gets its own pipe and log folders (the copies find it through ``CUDA_MPS_PIPE_DIRECTORY``),
so no other process on the machine uses it, and it is told to quit when the arm ends, whatever
happened; no setting of the GPU is changed. A daemon that does not start is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_S = 0.5
ARMS = ("contexts", "mps")
MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_TIMEOUT_S = 30.0


def parse_copies(text: str) -> list[int]:
    """``1,4,9`` -> [1, 4, 9]; each a whole number ≥ 1, the first 1 (every speedup is against it)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers separated by commas, e.g. 1,4,9") from None
    if not counts or any(n < 1 for n in counts) or counts[0] != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected counts of at least 1, the first of them 1")
    return counts


def cpu_jiffies(stat_line: str) -> tuple[int, int]:
    """``/proc/stat``'s first line -> (busy, total) jiffies: idle and iowait are not busy."""
    fields = [int(v) for v in stat_line.split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def gpu_sample(line: str) -> tuple[float, float] | None:
    """nvidia-smi's ``utilization.gpu, memory.used`` (no units) -> (percent, MiB); None if unreadable."""
    parts = [p.strip() for p in line.split(",")]
    try:
        return float(parts[0]), float(parts[1])
    except (IndexError, ValueError):
        return None


@dataclass
class Sampler:
    """The host's busy cores and the GPU's use while copies run, sampled every SAMPLE_S."""

    gpu_index: int = 0
    cpu: list[tuple[int, int]] = field(default_factory=list)
    gpu: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        smi = shutil.which("nvidia-smi")
        while not self._stop.is_set():
            try:
                self.cpu.append(cpu_jiffies(Path("/proc/stat").read_text().splitlines()[0]))
            except (OSError, IndexError, ValueError):
                pass
            if smi:
                try:
                    out = subprocess.run([smi, "-i", str(self.gpu_index), "--query-gpu=utilization.gpu,memory.used",
                                          "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
                    sample = gpu_sample(out.stdout.strip().splitlines()[0]) if out.stdout.strip() else None
                    if sample:
                        self.gpu.append(sample)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._stop.wait(SAMPLE_S)

    def summary(self) -> dict:
        cores = os.cpu_count() or 1
        busy = None
        if len(self.cpu) >= 2:
            (b0, t0), (b1, t1) = self.cpu[0], self.cpu[-1]
            busy = round((b1 - b0) / (t1 - t0) * cores, 2) if t1 > t0 else None
        return {"cores_busy": busy, "host_cores": cores,
                "gpu_util": round(sum(u for u, _ in self.gpu) / len(self.gpu), 1) if self.gpu else None,
                "gpu_mem_mib": max((m for _, m in self.gpu), default=None), "gpu_samples": len(self.gpu)}


def run_copies(argv: list[str], copies: int, cap: float, logs: Path, gpu_index: int = 0,
               env: dict[str, str] | None = None, arm: str = "contexts") -> dict:
    """``copies`` of ``argv`` at once, each in its own session with its own log; at ``cap`` every
    copy still running is killed with its whole group. CPU time is that of the processes waited
    for (a killed copy's grandchildren are not)."""
    before = os.times()
    started = time.monotonic()
    procs = []
    with Sampler(gpu_index) as sampler:
        for i in range(copies):
            with (logs / f"{arm}-copy-{copies}-{i:02d}.log").open("wb") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True, env={**os.environ, **(env or {})}))
        cut = 0
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, cap - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                cut += 1
    wall = time.monotonic() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"copies": copies, "wall_s": round(wall, 2), "cut": cut,
            "returncodes": sorted({p.returncode for p in procs}), "cpu_s": round(cpu, 1),
            "cpu_s_per_copy": round(cpu / copies, 1), **sampler.summary()}


class MpsUnavailable(Exception):
    """The MPS control daemon could not be started here."""


class MpsDaemon:
    """An MPS control daemon of this run only, started before an arm's copies and told to quit after
    them: its pipe and log folders are its own, and its record says how it started and ended."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
        self.record: dict = {"pipe": self.env["CUDA_MPS_PIPE_DIRECTORY"]}

    def _control(self, args: list[str], text: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([MPS_CONTROL, *args], input=text, capture_output=True, text=True,
                              env={**os.environ, **self.env}, timeout=MPS_TIMEOUT_S)

    def __enter__(self) -> "MpsDaemon":
        for folder in ("pipe", "log"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        try:
            done = self._control(["-d"])
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsUnavailable(f"{MPS_CONTROL} -d: {exc}") from None
        self.record["start_rc"] = done.returncode
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise MpsUnavailable(f"{MPS_CONTROL} -d exited {done.returncode}" + (f": {said[-1]}" if said else ""))
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.record["quit_rc"] = self._control([], "quit\n").returncode
        except (OSError, subprocess.TimeoutExpired) as err:
            self.record["quit_rc"] = None
            self.record["quit_error"] = str(err)
        log = self.root / "log" / "control.log"
        if log.is_file():
            self.record["control_log_tail"] = log.read_text(errors="replace").splitlines()[-10:]


def run_counts(command: list[str], counts: list[int], cap: float, logs: Path, gpu_index: int, every_count: bool,
               env: dict[str, str] | None = None, arm: str = "contexts") -> list[dict]:
    """Each count in turn; after a count was cut, the larger ones are skipped unless ``every_count``."""
    rows: list[dict] = []
    cut_at = None
    for n in counts:
        if cut_at is not None and not every_count:
            rows.append({"copies": n, "skipped": f"an earlier count ({cut_at} copies) was cut at the cap"})
            continue
        rows.append(run_copies(command, n, cap, logs, gpu_index, env, arm))
        cut_at = n if rows[-1]["cut"] and cut_at is None else cut_at
    return with_speedups(rows)


def parse_arms(text: str) -> list[str]:
    arms = [a.strip() for a in text.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms) or len(set(arms)) != len(arms):
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or both of {', '.join(ARMS)}, e.g. contexts,mps")
    return arms


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's speedup against the single copy's wall, and its efficiency (speedup / copies)."""
    single = rows[0].get("wall_s") if rows and rows[0]["copies"] == 1 and not rows[0].get("cut") else None
    for row in rows:
        if single and row.get("wall_s", 0) > 0 and not row.get("cut", 1):
            row["speedup"] = round(row["copies"] * single / row["wall_s"], 2)
            row["efficiency"] = round(row["speedup"] / row["copies"], 2)
    return rows


def table(rows: list[dict]) -> str:
    head = "copies  wall_s  speedup  cpu_s/copy  cores_busy  gpu_util  gpu_mem_mib  cut"
    lines = [head]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['copies']:>6}  skipped: {r['skipped']}")
            continue
        lines.append(f"{r['copies']:>6}  {r['wall_s']:>6}  {r.get('speedup', '-'):>7}  {r['cpu_s_per_copy']:>10}  "
                     f"{r['cores_busy'] if r['cores_busy'] is not None else '-':>10}  "
                     f"{r['gpu_util'] if r['gpu_util'] is not None else '-':>8}  "
                     f"{r['gpu_mem_mib'] if r['gpu_mem_mib'] is not None else '-':>11}  {r['cut']:>3}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=parse_copies, default=[1, 4, 9, 16],
                    help="counts of copies to run at once, one count after the other, the first 1 (default 1,4,9,16)")
    ap.add_argument("--cap", type=float, default=300.0, help="seconds before a count's copies are killed")
    ap.add_argument("--every-count", action="store_true",
                    help="run every count even after one was cut (by default the larger ones are skipped: they "
                         "would be cut too)")
    ap.add_argument("--gpu-index", type=int, default=0, help="the GPU nvidia-smi samples")
    ap.add_argument("--arms", type=parse_arms, default=["contexts"],
                    help="contexts (separate CUDA contexts, the default), mps (with an MPS daemon of this run), or "
                         "contexts,mps for both, one after the other")
    ap.add_argument("--label", default="", help="a name for this command in the report")
    ap.add_argument("--out", type=Path)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to copy")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("bench_concurrency: no command: put it after --", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None and not Path(command[0]).is_file():
        print(f"bench_concurrency: {command[0]}: no such program", file=sys.stderr)
        return 2
    if "mps" in args.arms and shutil.which(MPS_CONTROL) is None:
        print(f"bench_concurrency: --arms mps needs {MPS_CONTROL} on PATH (it comes with the NVIDIA driver)",
              file=sys.stderr)
        return 2
    logs = Path(tempfile.mkdtemp(prefix="kvdiag-bench-concurrency-"))
    arms: dict[str, dict] = {}
    for arm in args.arms:
        if arm == "contexts":
            arms[arm] = {"rows": run_counts(command, args.copies, args.cap, logs, args.gpu_index, args.every_count)}
            continue
        daemon = MpsDaemon(logs / "mps")
        try:
            with daemon:
                rows = run_counts(command, args.copies, args.cap, logs, args.gpu_index, args.every_count,
                                  daemon.env, arm)
        except MpsUnavailable as exc:
            arms[arm] = {"rows": [], "mps": {**daemon.record, "error": str(exc)}}
            continue
        arms[arm] = {"rows": rows, "mps": daemon.record}
    first = next(iter(arms.values()))
    report = {"label": args.label, "command": command, "cap_s": args.cap, "logs": str(logs), "rows": first["rows"],
              "arms": arms}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("\n\n".join(f"{arm}:\n{table(data['rows'])}" if len(arms) > 1 else table(data["rows"])
                      for arm, data in arms.items() if data["rows"]))
    failed = [data["mps"]["error"] for data in arms.values() if "error" in data.get("mps", {})]
    for error in failed:
        print(f"bench_concurrency: no MPS arm: {error}", file=sys.stderr)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
