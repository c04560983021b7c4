"""``kvdiag doctor``: is this machine able to see each defect class it will be asked about?

A sanitizer that cannot see a defect class on some GPU/driver/toolkit prints
"0 errors" all the same. So before kvdiag lets a tool's silence mean
``not-reproduced``, that tool must, on this machine:

* report its positive canary (a kernel of ours with exactly that defect) with the
  expected finding kind at the expected ``file:line``, and
* report nothing on the negative canary (the fixed twin), with its summary
  printed and the kernel really launched (the launcher's JSON line says so:
  a run where nothing was launched is clean for every tool).

The doctor first lists the prerequisites as :class:`Check` lines (GPU, driver,
nvcc, compute-sanitizer, pycuda/cupy, optionally the build's staleness), then
runs each tool's pair under ``compute-sanitizer --tool T`` and records the
outcome per machine key (``kvdiag.controls.cache``). Without a GPU or a
sanitizer each line says so (``skip``) and nothing raises.

Judging is split from running (:mod:`kvdiag.controls.judging` reads a recorded
log), so it is tested on fixtures; this module runs the pairs and keeps the record.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from kvdiag import resources
from kvdiag.controls.cache import (ControlRecord, control_run_lock, load_control, load_controls, store_controls,
                                   store_record)
from kvdiag.controls.canaries import ALL_TOOLS, Canary, pair_for
from kvdiag.controls.judging import judge_negative, judge_positive, plural
from kvdiag.controls.staleness import prove_current
from kvdiag.controls.launch import (CompileError, Compiler, arch_for, available_launchers, canary_program, find_nvcc,
                                   parse_launcher_line)
from kvdiag.errors import KvdiagError, UsageError
from kvdiag.exitcodes import ExitCode
from kvdiag.proc.runner import CommandError, run_command
from kvdiag.proc.sanitizer import SanitizerInvocation, find_sanitizer
from kvdiag.progress import Progress, counted
from kvdiag.workspace.build import inspect_build
from kvdiag.workspace.host import fingerprint_environment

__all__ = [
    "ALL_TOOLS",
    "CONTROL_TIMEOUT_S",
    "Check",
    "ControlResult",
    "DoctorReport",
    "doctor_exit_code",
    "ensure_control",
    "format_report",
    "run_doctor",
    "run_tool_control",
]

CONTROL_TIMEOUT_S = 120.0
# A canary's error ends its kernel, as the batches' do: a destroyed context is fatal to MPS clients (session 27).
CONTROL_DESTROY = "kernel"
STATUSES = ("pass", "fail", "skip", "warn")


@dataclass(frozen=True)
class Check:
    name: str
    status: str          # pass | fail | skip | warn
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check status must be one of {STATUSES}, not {self.status!r}")

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class ControlResult:
    tool: str
    canary: str                  # the positive canary; its twin is in negative_detail
    positive_detected: bool
    positive_detail: str         # "barrier-divergence at barrier_divergent.cu:27, 128 errors"
    negative_clean: bool
    negative_detail: str
    launcher: str | None
    passed: bool                 # positive_detected and negative_clean
    duration_s: float
    log_dir: str
    cached_from: str | None = None   # date of the cached record this result was read from

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "canary": self.canary,
            "positive_detected": self.positive_detected,
            "positive_detail": self.positive_detail,
            "negative_clean": self.negative_clean,
            "negative_detail": self.negative_detail,
            "launcher": self.launcher,
            "passed": self.passed,
            "duration_s": round(self.duration_s, 3),
            "log_dir": self.log_dir,
            "cached_from": self.cached_from,
        }

    def summary(self) -> str:
        if self.passed:
            return f"positive: {self.positive_detail}; negative: {self.negative_detail}"
        parts = []
        if not self.positive_detected:
            parts.append(f"positive NOT detected: {self.positive_detail}")
        if not self.negative_clean:
            parts.append(f"negative NOT clean: {self.negative_detail}")
        return "; ".join(parts)


@dataclass(frozen=True)
class DoctorReport:
    env_key: str
    date: str
    checks: tuple[Check, ...]
    controls: tuple[ControlResult, ...]
    tools: tuple[str, ...] = ALL_TOOLS
    versions: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def trusted_tools(self) -> tuple[str, ...]:
        return tuple(c.tool for c in self.controls if c.passed)

    @property
    def skipped(self) -> bool:
        """No GPU or no sanitizer: the controls could not run at all."""
        return not self.controls and any(c.name.startswith("control ") and c.status == "skip"
                                         for c in self.checks)

    @property
    def ok(self) -> bool:
        """Every requested tool proven here, and no check failed."""
        if any(c.status == "fail" for c in self.checks):
            return False
        return set(self.trusted_tools) >= set(self.tools)

    def records(self) -> list[ControlRecord]:
        """Cache records of the controls that ran now (cached ones are not rewritten)."""
        return [_record(self.env_key, c, self.date, self.versions) for c in self.controls
                if c.cached_from is None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_key": self.env_key,
            "date": self.date,
            "ok": self.ok,
            "exit_code": doctor_exit_code(self),
            "tools": list(self.tools),
            "trusted_tools": list(self.trusted_tools),
            "checks": [c.to_dict() for c in self.checks],
            "controls": [c.to_dict() for c in self.controls],
            "versions": dict(self.versions),
            "environment": dict(self.environment),
        }


def doctor_exit_code(report: DoctorReport) -> int:
    """0: every tool trusted; 3: no GPU / sanitizer, nothing could be proven (skipped);
    4: a control failed or could not run, or a check failed (not trustworthy)."""
    if report.skipped:
        return int(ExitCode.SKIPPED)
    if report.ok:
        return int(ExitCode.OK)
    return int(ExitCode.INCONCLUSIVE)


def _record(env_key: str, c: ControlResult, date: str, versions: dict[str, Any]) -> ControlRecord:
    return ControlRecord(
        env_key=env_key, tool=c.tool, passed=c.passed, date=date, detail=c.summary(),
        launcher=c.launcher, versions={**versions, "launcher": c.launcher},
        positive_detected=c.positive_detected, positive_detail=c.positive_detail,
        negative_clean=c.negative_clean, negative_detail=c.negative_detail, log_dir=c.log_dir,
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- running


def _child_env() -> dict[str, str]:
    existing = os.environ.get("PYTHONPATH")
    path = str(resources.import_root()) + (os.pathsep + existing if existing else "")
    return {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class _CanaryRun:
    log_text: str | None
    launcher: dict | None
    note: str
    duration_s: float


def _run_canary(c: Canary, *, built: Path, native: bool, sanitizer: Path, log_dir: Path,
                timeout: float) -> _CanaryRun:
    """One canary (its cubin, or its nvcc-built program when ``native``) under its tool: what the
    tool wrote, and what the launcher said."""
    log_file = log_dir / f"{c.name}.{c.tool}.log"
    program = canary_program(c, built, native)
    argv = SanitizerInvocation(c.tool, options=c.sanitizer_options,
                               destroy_on_device_error=CONTROL_DESTROY).argv(sanitizer, log_file, program)
    started = time.monotonic()
    try:
        result = run_command(argv, timeout=timeout, log_dir=log_dir, name=f"{c.name}.{c.tool}",
                             env_overrides=_child_env())
    except CommandError as exc:
        return _CanaryRun(None, None, f"compute-sanitizer cannot be run: {exc}", time.monotonic() - started)
    note = result.describe()
    if result.timed_out:
        note = f"{note}; see {result.combined_path}"
    text = log_file.read_text(encoding="utf-8", errors="replace") if log_file.is_file() else ""
    if not text.strip():
        # The tool failed before opening its log (bad option, no driver): its words went to the streams.
        text = result.combined_text()
    return _CanaryRun(text or None, parse_launcher_line(result.stdout_text()), note, result.duration_s)


def _prerequisite_gap(env, sanitizer: Path | None) -> tuple[str, str] | None:
    """(status, why) when the controls cannot run at all; None when they can."""
    missing_parts = [why for why, missing in (("no CUDA GPU visible", not env.gpu.available),
                                              ("compute-sanitizer not found", sanitizer is None)) if missing]
    if missing_parts:
        return "skip", "not run: " + ", ".join(missing_parts)
    if _native_canaries() and _nvcc_path(env) is None and find_nvcc() is None:
        return "fail", "not run: neither pycuda nor cupy is importable and nvcc is not found: no canary can run"
    return None


def _native_canaries() -> bool:
    """Neither pycuda nor cupy: the canaries run as nvcc-built programs."""
    return all(why is not None for why in available_launchers().values())


def _arch(env) -> str:
    devices = getattr(env.gpu, "devices", ())
    return arch_for(devices[0].compute_capability if devices else None)


def _nvcc_path(env) -> Path | None:
    p = getattr(env.tools, "nvcc_path", None)
    return Path(p) if p else None


def _run_pair(*, tool: str, compiler: Compiler, sanitizer: Path, log_dir: Path,
              timeout: float) -> ControlResult:
    pair = pair_for(tool)
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    native = _native_canaries()
    build = compiler.executable if native else compiler.compile
    try:
        built = {c.name: build(c) for c in (pair.positive, pair.negative)}
    except CompileError as exc:
        why = f"canary not compiled: {exc}"
        return ControlResult(tool, pair.positive.name, False, why, False, why, None, False,
                             time.monotonic() - started, str(log_dir))
    pos = _run_canary(pair.positive, built=built[pair.positive.name], native=native, sanitizer=sanitizer,
                      log_dir=log_dir, timeout=timeout)
    neg = _run_canary(pair.negative, built=built[pair.negative.name], native=native, sanitizer=sanitizer,
                      log_dir=log_dir, timeout=timeout)
    detected, pos_detail = judge_positive(pair.positive, pos.log_text, run_note=pos.note)
    clean, neg_detail = judge_negative(pair.negative, neg.log_text, neg.launcher, run_note=neg.note)
    launcher = (neg.launcher or pos.launcher or {}).get("launcher")
    return ControlResult(tool, pair.positive.name, detected, pos_detail, clean, neg_detail, launcher,
                         detected and clean, time.monotonic() - started, str(log_dir))


def _versions(env) -> dict[str, Any]:
    material = env.key_material() if hasattr(env, "key_material") else {}
    return {**material, "nvcc_path": getattr(env.tools, "nvcc_path", None),
            "compute_sanitizer_path": getattr(env.tools, "compute_sanitizer_path", None)}


@dataclass(frozen=True)
class ToolControl:
    """:func:`run_tool_control`'s answer: a result, or why none could be had."""

    status: str                      # pass | fail | skip
    detail: str
    date: str
    result: ControlResult | None


def run_tool_control(*, home: Path, env, tool: str, sanitizer: Path | None, log_dir: Path,
                     timeout: float = CONTROL_TIMEOUT_S) -> tuple[ToolControl, ControlRecord | None]:
    """Run one tool's pair now (no cache lookup); the record to store, None when nothing ran."""
    date = _now()
    gap = _prerequisite_gap(env, sanitizer)
    if gap is not None:
        return ToolControl(gap[0], gap[1], date, None), None
    compiler = Compiler(home=Path(home), arch=_arch(env), nvcc=_nvcc_path(env), log_dir=Path(log_dir) / "compile")
    result = _run_pair(tool=tool, compiler=compiler, sanitizer=sanitizer, log_dir=Path(log_dir) / tool,
                       timeout=timeout)
    outcome = ToolControl("pass" if result.passed else "fail", result.summary(), date, result)
    return outcome, _record(env.key(), result, date, _versions(env))


# --------------------------------------------------------------------------- checks


def ensure_control(home: Path, env, tool: str, sanitizer: Path | None, log_dir: Path) -> ControlRecord:
    """``tool``'s record for ``env`` (an ``Environment``), running its pair first if there is none.

    Never raises for a missing GPU, launcher or sanitizer: the record then says
    the control could not run (``passed`` False) and is *not* stored, so a later
    call on a better-equipped run tries again.
    """
    env_key = env.key()
    existing = load_control(home, env_key, tool)
    if existing is not None:
        return existing
    # One control run per tool at a time, across the threads of a scan and across kvdiag
    # processes: two concurrent runs compiled the same canary into the same folder, and the
    # loser's verdict became "control could not run" (measured: 11 of 132 scan cases).
    with control_run_lock(home, tool):
        existing = load_control(home, env_key, tool)
        if existing is not None:
            return existing
        result, record = run_tool_control(home=home, env=env, tool=tool, sanitizer=sanitizer, log_dir=log_dir)
        if record is None:
            # Not run at all (no GPU / sanitizer / launcher): say why, store nothing.
            return ControlRecord(env_key=env_key, tool=tool, passed=False, date=result.date,
                                 detail=result.detail, positive_detected=None, negative_clean=None)
        store_record(home, record)
        return record


def _gpu_checks(env) -> list[Check]:
    gpu = env.gpu
    if not gpu.available:
        notes = "; ".join(gpu.notes) if getattr(gpu, "notes", None) else "no source reported a device"
        return [Check("gpu", "skip", f"no CUDA GPU visible ({notes})"),
                Check("driver", "skip" if not gpu.driver_version else "pass",
                      f"NVIDIA driver {gpu.driver_version}, but no GPU visible" if gpu.driver_version
                      else "no NVIDIA driver loaded (no driver version readable)")]
    devs = ", ".join(f"{d.name} (cc {d.cc_str or '?'}, {d.arch or '?'})" for d in gpu.devices)
    checks = [Check("gpu", "pass", f"{plural(len(gpu.devices), 'device')}: {devs}; via {gpu.source}"
                    + f"; canaries compiled for {_arch(env)}")]
    if gpu.driver_version:
        cuda = f", supports CUDA {gpu.driver_cuda_version}" if gpu.driver_cuda_version else ""
        runtime = f", runtime {gpu.runtime_version}" if gpu.runtime_version else ""
        checks.append(Check("driver", "pass", f"{gpu.driver_version}{cuda}{runtime}"))
    else:
        checks.append(Check("driver", "warn", "driver version unknown: controls are keyed without it"))
    return checks


def _tool_checks(env, sanitizer: Path | None) -> list[Check]:
    tools = env.tools
    has_gpu = env.gpu.available
    checks = []
    nvcc_path = getattr(tools, "nvcc_path", None)
    if nvcc_path and tools.nvcc:
        checks.append(Check("nvcc", "pass", f"{tools.nvcc} ({nvcc_path})"))
    elif nvcc_path:
        checks.append(Check("nvcc", "warn", f"{nvcc_path} found but `nvcc --version` printed no version"))
    else:
        checks.append(Check("nvcc", "fail" if has_gpu and sanitizer else "skip",
                            "nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): "
                            "the canaries cannot be compiled"))
    if sanitizer is None:
        checks.append(Check("compute-sanitizer", "skip",
                            "compute-sanitizer not found (--sanitizer, $KVDIAG_COMPUTE_SANITIZER, PATH, "
                            "$CUDA_HOME/bin, /usr/local/cuda/bin)"))
    elif tools.compute_sanitizer:
        checks.append(Check("compute-sanitizer", "pass", f"{tools.compute_sanitizer} ({sanitizer})"))
    else:
        checks.append(Check("compute-sanitizer", "warn", f"{sanitizer} found but `--version` printed no version"))
    launchers = available_launchers()
    any_launcher = any(why is None for why in launchers.values())
    for name, why in launchers.items():
        if why is None:
            checks.append(Check(name, "pass", "importable"))
        elif any_launcher:
            other = next(n for n, w in launchers.items() if w is None)
            checks.append(Check(name, "warn", f"not importable ({why}); {other} launches the canaries"))
        elif has_gpu:
            checks.append(Check(name, "warn", f"not importable ({why}); neither launcher is: the canaries run as "
                                              "nvcc-built programs (pip install -e '.[gpu]' adds them)")
                          if nvcc_path else Check(name, "fail", f"not importable ({why}); neither launcher is "
                                                                "and nvcc is not found: no canary can be launched"))
        else:
            checks.append(Check(name, "skip", f"not importable ({why}); not needed without a GPU"))
    return checks


def _build_check(build_dir: Path, log_dir: Path, home: Path | None = None) -> Check:
    try:
        info = inspect_build(build_dir, log_dir=log_dir)
    except KvdiagError as exc:
        return Check("build", "fail", str(exc))
    st = prove_current(info.staleness, generator=info.generator, log_dir=log_dir, home=home)
    if st.stale is True:
        return Check("build", "fail", f"stale against its sources ({st.tool}): {st.detail}")
    if st.stale is False and st.checked:
        return Check("build", "pass", f"current with its sources ({st.tool}); {st.proof}")
    return Check("build", "warn", f"not checked: {st.detail}")


# --------------------------------------------------------------------------- the doctor


def _cached_result(record: ControlRecord) -> ControlResult:
    return ControlResult(
        tool=record.tool, canary=pair_for(record.tool).positive.name,
        positive_detected=bool(record.positive_detected), positive_detail=record.positive_detail,
        negative_clean=bool(record.negative_clean), negative_detail=record.negative_detail,
        launcher=record.launcher, passed=record.passed, duration_s=0.0, log_dir=record.log_dir or "",
        cached_from=record.date,
    )


def run_doctor(*, home: Path, sanitizer: Path | None, build_dir: Path | None, refresh: bool,
               tools: Sequence[str] = ALL_TOOLS, log_dir: Path, environment=None,
               timeout: float = CONTROL_TIMEOUT_S, progress: Progress | None = None) -> DoctorReport:
    """The checks, then each tool's pair (a passed record for this machine is reused
    unless ``refresh``; a failed one always runs again); ran controls are stored.

    ``sanitizer`` is an explicit compute-sanitizer (None: looked for); an explicit
    path that is not a sanitizer raises :class:`kvdiag.errors.UsageError`.
    ``environment`` replaces the fingerprint (tests).
    """
    unknown = [t for t in tools if t not in ALL_TOOLS]
    if unknown:
        raise UsageError(f"unknown sanitizer tool(s): {', '.join(unknown)}; known: {', '.join(ALL_TOOLS)}")
    home, log_dir = Path(home), Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    sanitizer_path = find_sanitizer(sanitizer)
    if environment is None:
        environment = fingerprint_environment(log_dir=log_dir / "environment", sanitizer=sanitizer_path)
    env = environment
    if sanitizer_path is None and getattr(env.tools, "compute_sanitizer_path", None):
        sanitizer_path = Path(env.tools.compute_sanitizer_path)

    env_key = env.key()
    date = _now()
    checks = _gpu_checks(env) + _tool_checks(env, sanitizer_path)
    if build_dir is not None:
        checks.append(_build_check(Path(build_dir), log_dir / "build", home))

    controls: list[ControlResult] = []
    cached = {} if refresh else load_controls(home, env_key)
    gap = _prerequisite_gap(env, sanitizer_path)
    compiler = None
    for tool in counted(tools, progress or Progress(), "sanitizer tools", lambda t: f"control {t}: both canaries",
                        lambda t: f"{t}: {checks[-1].status}"):
        if gap is not None:
            checks.append(Check(f"control {tool}", gap[0], gap[1]))
            continue
        record = cached.get(tool)
        if record is not None and record.passed:
            result = _cached_result(record)
            checks.append(Check(f"control {tool}", "pass",
                                f"passed on this machine on {record.day} (cached; --refresh runs it again): "
                                f"{record.detail}"))
            controls.append(result)
            continue
        if compiler is None:
            compiler = Compiler(home=home, arch=_arch(env), nvcc=_nvcc_path(env), log_dir=log_dir / "compile")
        result = _run_pair(tool=tool, compiler=compiler, sanitizer=sanitizer_path, log_dir=log_dir / tool,
                           timeout=timeout)
        controls.append(result)
        checks.append(Check(f"control {tool}", "pass" if result.passed else "fail", result.summary()))

    report = DoctorReport(env_key=env_key, date=date, checks=tuple(checks), controls=tuple(controls),
                          tools=tuple(tools), versions=_versions(env),
                          environment=env.to_dict() if hasattr(env, "to_dict") else {})
    store_controls(home, report.records())
    return report


def format_report(report: DoctorReport) -> str:
    """The doctor's answer as text: one line per check, then the verdict on trust."""
    width = max((len(c.name) for c in report.checks), default=4)
    lines = [f"{c.status:<5} {c.name:<{width}}  {c.detail}" for c in report.checks]
    code = doctor_exit_code(report)
    if code == ExitCode.OK:
        lines.append(f"all of {', '.join(report.tools)} proven on this machine (key {report.env_key})")
    elif code == ExitCode.SKIPPED:
        lines.append("nothing proven: no GPU or no compute-sanitizer here; "
                     "sanitizer steps cannot end not-reproduced on this machine")
    else:
        trusted = ", ".join(report.trusted_tools) or "none"
        lines.append(f"not trustworthy: tools proven here: {trusted} (key {report.env_key})")
    return "\n".join(lines)
