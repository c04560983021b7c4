"""Scenario builds for the engine tests: fake build dirs, a fake compute-sanitizer, entries, runs.

Everything is made under ``tmp_path``; the programs and data come from
``tests/scenarios/builds`` and ``tests/fixtures`` (found relative to this file).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import stat
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from process_checks import pid_gone, wait_until  # noqa: F401 - re-exported for the engine tests

from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.verdict.execute import run_entry
from kvdiag.engine.verdict.planning import RunOptions
from kvdiag.engine.verdict.judge import Gate
from kvdiag.engine.verdict.target import Target, prepare_target
from kvdiag.records.verdict import Outcome
from kvdiag.registry.entry import Entry
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunDir
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint

REPO = Path(__file__).resolve().parents[2]
SCENARIO_BUILDS = REPO / "tests" / "scenarios" / "builds"
FIXTURES = REPO / "tests" / "fixtures"
TRANSCRIPTS = FIXTURES / "transcripts"
REGISTRY = REPO / "registry"

# What fake-data/ of every scenario build holds (name there: source).
FAKE_DATA = {
    "help-upstream.txt": FIXTURES / "backend_ops" / "help-upstream.txt",
    "synccheck-single-case.log": TRANSCRIPTS / "synccheck-single-case.log",
}

D2_CASE = ("hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,"
           "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
D2_INSTANTIATION = ("flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, "
                    "(bool)0, (bool)0, (bool)0, (bool)1>")
EARLIER_CASE = ("hsk=128,hsv=128,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,"
                "logit_softcap=0.000000,prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3]")
EARLIER_CASE_LINE = f"  FLASH_ATTN_EXT({EARLIER_CASE}): \x1b[1;32mOK\x1b[0m"
BARRIER_LINE = "Barrier error detected. Divergent thread(s) in block."

ALLOWED = Gate(True, "synccheck's control passed on this machine (test gate)")
REFUSED = Gate(False, "synccheck's positive control was not detected on this machine (test gate)")


def read_recorded(path: Path) -> str:
    """A recorded fixture file's text, gunzipped when it ends in .gz."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    return path.read_text(encoding="utf-8")


def fake_gpu(cc: tuple[int, int] = (9, 0)) -> GpuFingerprint:
    device = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability=cc, sm_count=132,
                       total_memory_bytes=143 << 30, pci_bus_id=None)
    return GpuFingerprint(source="test", devices=(device,), driver_version="580.159.04",
                          driver_cuda_version="13.0", runtime_version="13.0", visible_devices=None, notes=())


NO_GPU = GpuFingerprint(source="none", devices=(), driver_version=None, driver_cuda_version=None,
                        runtime_version=None, visible_devices=None, notes=("test: no GPU",))


def _write_exe(path: Path, source: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, path)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def cmake_cache(source_dir: Path, *, lineinfo: bool = True, extra: dict[str, str] | None = None) -> str:
    entries = {
        "CMAKE_BUILD_TYPE:STRING": "Release",
        "CMAKE_CUDA_ARCHITECTURES:STRING": "90",
        "CMAKE_CUDA_FLAGS:STRING": "-lineinfo" if lineinfo else "",
        "CMAKE_HOME_DIRECTORY:INTERNAL": str(source_dir),
        "GGML_CUDA:BOOL": "ON",
        "GGML_CUDA_FA:BOOL": "ON",
        **(extra or {}),
    }
    return "# This is the CMakeCache file.\n" + "".join(f"{k}={v}\n" for k, v in entries.items())


@dataclass
class RunResult:
    outcome: Outcome
    run_dir: RunDir
    gate_calls: list[Any]

    @property
    def run_json(self) -> dict[str, Any]:
        return self.run_dir.read()

    @property
    def attempt(self):
        return self.outcome.attempts[0]

    @property
    def evidence(self):
        return self.outcome.attempts[0].evidence

    def log(self, name: str) -> str:
        return (self.run_dir.path / "logs" / name).read_text(errors="replace")

    def log_names(self) -> set[str]:
        return {p.name for p in (self.run_dir.path / "logs").iterdir()}


class Scenarios:
    """Makes scenario builds, sanitizers, entries and runs inside one test's tmp_path.

    ``shared`` is a session-wide cache of prepared targets (see :meth:`target_for`):
    preparing one runs five processes, and most scenarios are only read, never changed.
    """

    def __init__(self, root: Path, shared: "SharedTargets | None" = None):
        self.root = root
        self.registry_dir = root / "registry"
        self.registry_dir.mkdir(parents=True)
        self.shared = shared
        self._n = 0

    def _fresh(self, stem: str) -> Path:
        self._n += 1
        return self.root / f"{stem}-{self._n}"

    # ---------------------------------------------------------------- builds and tools

    def build(self, scenario: str | None, *, lineinfo: bool = True, cache: bool = True,
              cache_extra: dict[str, str] | None = None) -> Path:
        """A fake build dir: CMakeCache.txt and bin/test-backend-ops running ``scenario``."""
        return make_build(self._fresh("build"), scenario, lineinfo=lineinfo, cache=cache, cache_extra=cache_extra)

    def sanitizer(self, mode: str = "follow") -> Path:
        """The fake compute-sanitizer in its own folder, in this mode (see tests/scenarios/fake_compute_sanitizer.py)."""
        return make_sanitizer(self._fresh(f"sanitizer-{mode}"), mode)

    def target(self, build: Path | None, *, sanitizer: Path | None, gpu: GpuFingerprint | None = None) -> Target:
        """prepare_target on the scenario build, with the GPU replaced (no GPU is needed)."""
        return make_target(build, log_dir=self._fresh("target-logs"), sanitizer=sanitizer, gpu=gpu)

    def target_for(self, scenario: str | None, *, sanitizer: str | None = "follow", lineinfo: bool = True,
                   gpu: GpuFingerprint | None = None) -> Target:
        """A prepared target on a scenario build that no test changes, shared by the session."""
        assert self.shared is not None
        target = self.shared.get(scenario, sanitizer, lineinfo)
        if gpu is not None:
            target = dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=gpu))
        return target

    # ---------------------------------------------------------------- entries

    def entry(self, entry_id: str, body: str) -> Entry:
        """Write a small entry (TOML ``body`` below a fixed [defect]/[location]) and load it."""
        text = ENTRY_TEMPLATE.format(id=entry_id, body=textwrap.dedent(body).strip())
        (self.registry_dir / f"{entry_id}.md").write_text(text)
        registry = load_registry(self.registry_dir)
        assert not registry.problems, [str(p) for p in registry.problems]
        return registry.get(entry_id)

    # ---------------------------------------------------------------- runs

    def run(self, entry: Entry, target: Target, *, gate: Gate = ALLOWED, runs: int | None = None,
            step: str | None = None, attribute=None) -> RunResult:
        calls: list[Any] = []

        def provider(tool):
            # As the real provider (kvdiag.engine.verdict.target) does, a step without a sanitizer
            # gets the no-sanitizer gate; a sanitizer's gate is the one the test chose.
            calls.append(tool)
            return no_sanitizer_gate(tool) if tool is None else gate

        run_dir = RunDir(self._fresh("run"))
        options = RunOptions(step=step, runs=runs, attribute=attribute)
        outcome = run_entry(entry, target, run_dir, options=options, gate_provider=provider)
        return RunResult(outcome, run_dir, calls)


class SharedTargets:
    """Prepared targets by (scenario, sanitizer mode, lineinfo), made on first use."""

    def __init__(self, root: Path):
        self.root = root
        self._targets: dict[tuple, Target] = {}

    def get(self, scenario: str | None, sanitizer: str | None, lineinfo: bool) -> Target:
        key = (scenario, sanitizer, lineinfo)
        if key not in self._targets:
            stem = f"{scenario}-{sanitizer}-{'li' if lineinfo else 'noli'}"
            build = make_build(self.root / stem / "build", scenario, lineinfo=lineinfo)
            san = make_sanitizer(self.root / stem / "sanitizer", sanitizer) if sanitizer else None
            self._targets[key] = make_target(build, log_dir=self.root / stem / "target-logs", sanitizer=san)
        return self._targets[key]


def make_build(build: Path, scenario: str | None, *, lineinfo: bool = True, cache: bool = True,
               cache_extra: dict[str, str] | None = None) -> Path:
    build.mkdir(parents=True)
    if cache:
        # CMAKE_HOME_DIRECTORY names a source tree that is not on this machine (a copied build)
        source = build.parent / f"{build.name}-src"
        (build / "CMakeCache.txt").write_text(cmake_cache(source, lineinfo=lineinfo, extra=cache_extra))
    if scenario is not None:
        _write_exe(build / "bin" / "test-backend-ops", SCENARIO_BUILDS / f"{scenario}.py")
        shutil.copyfile(SCENARIO_BUILDS / "fakeops.py", build / "bin" / "fakeops.py")
        data = build / "fake-data"
        data.mkdir()
        for name, src in FAKE_DATA.items():
            shutil.copyfile(src, data / name)
    return build


def make_sanitizer(folder: Path, mode: str) -> Path:
    exe = _write_exe(folder / "compute-sanitizer", REPO / "tests" / "scenarios" / "fake_compute_sanitizer.py")
    (folder / "compute-sanitizer.mode").write_text(mode + "\n")
    return exe


def make_target(build: Path | None, *, log_dir: Path, sanitizer: Path | None,
                gpu: GpuFingerprint | None = None) -> Target:
    target = prepare_target(build, log_dir=log_dir, sanitizer=sanitizer)
    environment = dataclasses.replace(target.environment, gpu=fake_gpu() if gpu is None else gpu)
    return dataclasses.replace(target, environment=environment)


ENTRY_TEMPLATE = '''```toml
[defect]
id = "{id}"
title = "Scenario entry {id} of the engine tests"
summary = "Made in tmp_path by tests/engine to drive one verdict path."
owner = "upstream"
status = "open"
severity = "low"
reported = "2026-11-29"
modified = "2026-11-29"

[location]
component = "tests/engine"

{body}
```

# {id}

A scenario entry: it exists only for the engine tests.
'''

# D2's fast step, for custom entries that change one thing about it.
D2_PARAMS = (r"hsk=256,hsv=256,nh=4,nr23=\[4,1\],kv=512,nb=3,mask=1,sinks=0,max_bias=0\.000000,"
             r"logit_softcap=0\.000000,prec=f32,type_K=f16,type_V=f16,permute=\[0,1,2,3\]")
BACKEND_OPS_ARGV = ('["{{ bin[\'test-backend-ops\'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", '
                    '"-p", "{{ params }}"]')


def d2_like(*, timeout: int = 120, runs: int | None = None, sanitizer: bool = True, applies: str = "",
            requires: str = "", step_extra: str = "", signature: str | None = None) -> str:
    """TOML of an entry with D2's fast step (and signature unless ``signature`` is given)."""
    san = 'sanitizer = "synccheck"\nsanitizer_options = ["--show-backtrace", "device"]\n' if sanitizer else ""
    sig = signature if signature is not None else textwrap.dedent('''
        [[signature]]
        type = "sanitizer"
        tool = "synccheck"
        kind = "barrier-divergence"
        site = 'fattn-mma-f16\\.cuh:\\d+'
        kernel = "^flash_attn_ext_f16"
        ''')
    return (
        f"{applies}\n\n[requires]\nbinaries = [\"test-backend-ops\"]\n{requires}\n\n"
        "[[repro]]\nname = \"fast\"\nkind = \"backend-ops\"\ndescription = \"D2's case.\"\n"
        f"argv = {BACKEND_OPS_ARGV}\ntimeout = {timeout}\n"
        + (f"runs = {runs}\n" if runs else "")
        + san + step_extra + "\n"
        + f"vars = {{ op = \"FLASH_ATTN_EXT\", params = '{D2_PARAMS}' }}\n\n"
        + sig
    )


# ------------------------------------------------------------------ processes



def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


class Printed:
    """What one server printed (on stderr, as llama-server logs) and a clean exit: a finished
    process as the observer reads it, for judging recorded server output."""

    def __init__(self, stderr: str):
        self.stderr, self.returncode, self.signal = stderr, 0, None
        self.timed_out = self.interrupted = False
        self.ok = True

    def stdout_text(self) -> str:
        return ""

    def stderr_text(self) -> str:
        return self.stderr

    def combined_text(self) -> str:
        return self.stderr

    def describe(self) -> str:
        return "exit 0"

    def to_dict(self) -> dict:
        return {"returncode": 0}


def judge_d5_servers(kvarn5_log: str, q8_0_log: str):
    """D5 as the registry judges it, from two recorded server logs: the kvarn5 step's, and the
    q8_0 step's as its comparison arm (the relative signature reads one figure from each)."""
    from kvdiag.engine.verdict.judge import Gate, judge_attempt
    from kvdiag.engine.evidence.observe import ArmReading, observe
    from kvdiag.registry.loader import load_registry

    d5 = load_registry(None).get("D5")
    arm = ArmReading(step="q8_0-control", ran=True, why="", exit="exit 0",
                     streams={"combined": q8_0_log, "stderr": q8_0_log, "stdout": ""})
    obs = observe(d5.default_step, [Printed(kvarn5_log)], [])
    return judge_attempt(d5, obs, Gate(True, "no sanitizer involved"), 1, 0.0, comparison=lambda: arm)


def recorded_command(logs: Path, name: str, combined: Path | None = None):
    """A device run's command as the runner left it: its ``<name>.cmd.json`` result and its logs
    (``combined``: a combined log written for a run on a terminal, which kept none)."""
    from datetime import datetime, timezone

    from kvdiag.proc.runner import CommandResult

    result = json.loads((logs / f"{name}.cmd.json").read_text())["result"]
    return CommandResult(argv=tuple(result["argv"]), returncode=result["returncode"], signal=result["signal"],
                         timed_out=False, interrupted=False, duration_s=result["duration_s"], log_dir=logs,
                         stdout_path=logs / f"{name}.stdout.log", stderr_path=logs / f"{name}.stderr.log",
                         combined_path=combined or logs / f"{name}.combined.log",
                         started_at=datetime(2026, 12, 6, tzinfo=timezone.utc).isoformat())


def unpacked_store(tmp_path_factory, archive: Path) -> Path:
    """A recorded session's run store (a .tar.gz or .tar.xz of its run folders), unpacked once per module."""
    import tarfile

    root = tmp_path_factory.mktemp(archive.parent.name)
    with tarfile.open(archive) as opened:
        opened.extractall(root, filter="data")
    return root
