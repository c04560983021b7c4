"""The target of a verdict run: the user's build, this machine's GPU and tools, and the controls gate.

Prepared once per invocation (a sweep shares it across entries) and recorded in
every run, so a verdict always says which build, commit, GPU, driver, toolkit
and sanitizer version it was reached on.

The controls gate (`controls_gate_provider`) is made once per invocation too: a tool's canary
pair is run lazily, once per machine key, the first time a run would otherwise conclude
not-reproduced from that tool, so `kvdiag run` works without a prior `kvdiag doctor`, and a
failed or missing control turns the verdict into inconclusive with the reason.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvdiag.controls.cache import not_reproduced_gate
from kvdiag.controls.doctor import ensure_control
from kvdiag.controls.gate import Gate, GateProvider, no_sanitizer_gate
from kvdiag.controls.staleness import prove_current
from kvdiag.engine.verdict.applicability import Facts
from kvdiag.proc.sanitizer import find_sanitizer
from kvdiag.workspace.build import (
    BackendOpsInfo,
    find_binaries,
    inspect_build,
    probe_backend_ops,
    probe_help,
    source_tree_build,
)
from kvdiag.workspace.history import TreeHistory
from kvdiag.workspace.host import Environment, fingerprint_environment
from kvdiag.workspace.memo import TEXT, Codec, binary_key, environment_key, memoised

ENVIRONMENT = Codec(dump=Environment.to_dict, load=Environment.from_dict)
BACKEND_OPS = Codec(dump=BackendOpsInfo.to_dict, load=BackendOpsInfo.from_dict)


@dataclass(frozen=True)
class Target:
    build: Any                     # BuildInfo | None
    environment: Any               # target.host.Environment
    sanitizer: Path | None
    backend_ops: Any               # BackendOpsInfo | None
    server_help: Callable[[], str | None] | None = None   # llama-server --help, asked for only when needed
    history: Any = None            # TreeHistory of the build's source tree (git asked only when a range is)
    probe_program: Callable[[], Any] | None = None        # the launch probe's test-backend-ops (ProbeProgram)
    kernel_symbols: Callable[[], Any] | None = None       # the build's kernel listing (KernelSymbols)
    launch_lister: Callable[[], Any] | None = None        # kvdiag's CUPTI launch lister (LauncherLibrary), built once

    @property
    def gpu(self):
        return self.environment.gpu

    @property
    def first_device(self):
        devices = self.environment.gpu.devices
        return devices[0] if devices else None

    def facts(self) -> Facts:
        device = self.first_device
        return Facts(
            build=self.build,
            compute_capability=device.compute_capability if device else None,
            gpu_available=bool(self.environment.gpu.available),
            sanitizer=self.sanitizer,
            backend_ops_ops=tuple(self.backend_ops.ops) if self.backend_ops and self.backend_ops.ops else None,
            backend_ops_help=self.backend_ops.help_text if self.backend_ops else None,
            server_help=self.server_help,
        )

    def range_evidence(self, entry) -> Any:
        """What the entry's affected ranges say about this build's source tree (memoised)."""
        from kvdiag.engine.verdict.placement import tree_range_evidence

        git = self.build.git if self.build is not None else None
        return tree_range_evidence(entry, self.history, dirty=bool(git is not None and git.dirty))

    def device_key(self) -> str:
        device = self.first_device
        if device is None:
            return "no-gpu"
        return device.uuid or f"gpu{device.index}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "build": self.build.to_dict() if self.build is not None else None,
            "environment": self.environment.to_dict(),
            "sanitizer": str(self.sanitizer) if self.sanitizer else None,
            "backend_ops": {
                "path": str(self.backend_ops.path), "has_seed": self.backend_ops.has_seed,
                "has_test_file": self.backend_ops.has_test_file, "ops_known": len(self.backend_ops.ops),
            } if self.backend_ops is not None else None,
        }


def prepare_target(build_dir: Path | None, *, log_dir: Path, sanitizer: Path | None = None,
                   check_staleness: bool = True, home: Path | None = None, source_dir: Path | None = None) -> Target:
    """Inspect the build (CMakeCache, binaries, git, staleness), the GPU and the tools.

    With `home`, the environment fingerprint and the test-backend-ops probe are
    memoised (kvdiag.workspace.memo); the build itself (git state, staleness) is
    always inspected afresh, since that is what a verdict must be current about. A
    "current" answer is proven by the staleness control (kept per tool binary in `home`).
    """
    from concurrent.futures import ThreadPoolExecutor

    found_sanitizer = find_sanitizer(sanitizer)
    # The three inspections are independent processes (ninja -n and git; nvcc and
    # compute-sanitizer --version and the GPU query; test-backend-ops --help and
    # --list-ops): run side by side, they cost the slowest one, not the sum.
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="kvdiag-target") as pool:
        def environment():
            return fingerprint_environment(log_dir=log_dir, sanitizer=found_sanitizer)

        if home is not None:
            env_future = pool.submit(memoised, home, "environment", environment_key(found_sanitizer), environment,
                                     ENVIRONMENT, lambda env: env.gpu.available)
        else:
            env_future = pool.submit(environment)
        ops_future = None
        binaries = find_binaries(build_dir) if build_dir is not None and build_dir.is_dir() else {}
        if build_dir is not None:
            binary = binaries.get("test-backend-ops")
            if binary is not None and home is not None:
                ops_future = pool.submit(memoised, home, "backend-ops", binary_key(binary),
                                         lambda: probe_backend_ops(binary, log_dir=log_dir), BACKEND_OPS)
            elif binary is not None:
                ops_future = pool.submit(probe_backend_ops, binary, log_dir=log_dir)
        if build_dir is not None:
            build = proven(inspect_build(build_dir, log_dir=log_dir, check_staleness=check_staleness),
                           log_dir=log_dir, home=home)
        else:
            build = source_tree_build(source_dir, log_dir=log_dir) if source_dir is not None else None
        environment = env_future.result()
        backend_ops = ops_future.result() if ops_future is not None else None
    server = binaries.get("llama-server")
    server_help = _lazy_help(server, log_dir, home) if server is not None else None
    program = binaries.get("test-backend-ops")
    probe_program = symbols = None
    if build_dir is not None and home is not None and program is not None:
        probe_program = once(lambda: _probe_program(build_dir, program, home, log_dir))
    if build_dir is not None and build is not None and build.cuda:
        symbols = once(lambda: _kernel_symbols(build_dir, program, home, log_dir))
    lister = None
    if build is not None and build.cuda and home is not None:
        from kvdiag.workspace.launch_lister import build_lister

        lister = once(lambda: build_lister(home, log_dir=log_dir))
    history = TreeHistory(build.source_dir if build is not None else None, log_dir)
    return Target(build=build, environment=environment, sanitizer=found_sanitizer, backend_ops=backend_ops,
                  server_help=server_help, history=history, probe_program=probe_program, kernel_symbols=symbols,
                  launch_lister=lister)


def once(compute: Callable[[], Any]) -> Callable[[], Any]:
    """compute() on the first call, from whichever thread asks first; the same answer after."""
    lock = threading.Lock()
    answer: list[Any] = []

    def get() -> Any:
        with lock:
            if not answer:
                answer.append(compute())
            return answer[0]

    return get


def _probe_program(build_dir: Path, program: Path, home: Path, log_dir: Path):
    """The launch probe's build of test-backend-ops (kvdiag.probes.program_rebuild), or why not."""
    from kvdiag.engine.verdict.launch_program import LAUNCH_PROBE, disabled_reason
    from kvdiag.probes import load_probes
    from kvdiag.probes.program_rebuild import ProbeProgram, probe_program

    why = disabled_reason()
    if why:
        return ProbeProgram(LAUNCH_PROBE, why_not=why)
    try:
        probe = load_probes().get(LAUNCH_PROBE)
    except Exception as exc:  # a missing or malformed probe file is a reason, never a crash
        return ProbeProgram(LAUNCH_PROBE, why_not=str(exc))
    return probe_program(build_dir, program, probe, home=home, log_dir=log_dir)


def _kernel_symbols(build_dir: Path, program: Path | None, home: Path | None, log_dir: Path):
    from kvdiag.workspace.kernel_symbols import KernelSymbols, cuda_library, list_kernels

    library = cuda_library(build_dir, program)
    if library is None:
        return KernelSymbols(None, None, why_not=f"no ggml-cuda library found in {build_dir}")
    if home is None:
        return list_kernels(library, log_dir=log_dir)
    codec = Codec(dump=KernelSymbols.to_record, load=KernelSymbols.from_record)
    return memoised(home, "kernel-symbols", binary_key(library), lambda: list_kernels(library, log_dir=log_dir), codec,
                    lambda listing: listing.listed)


def proven(build, *, log_dir: Path, home: Path | None):
    """The build with its staleness answer proven by the control (kvdiag.controls.staleness): the one
    answer the D13 verdict, the warnings and every build table read."""
    staleness = prove_current(build.staleness, generator=build.generator, log_dir=log_dir, home=home)
    return dataclasses.replace(build, staleness=staleness) if staleness is not build.staleness else build


def _lazy_help(binary: Path, log_dir: Path, home: Path | None) -> Callable[[], str | None]:
    """llama-server's --help, run the first time an entry asks (memoised like test-backend-ops'):
    only entries with `applies.server_flags` pay for it."""
    lock = threading.Lock()
    answer: list[str | None] = []

    def probe() -> str | None:
        return probe_help(binary, log_dir=log_dir, name="llama-server-help")

    def get() -> str | None:
        with lock:
            if not answer:
                answer.append(memoised(home, "server-help", binary_key(binary), probe, TEXT,
                                       lambda text: text is not None)
                              if home is not None else probe())
            return answer[0]

    return get


def controls_gate_provider(home: Path, target: Target, log_dir: Path) -> GateProvider:
    """A gate per tool, computed once: safe to call from the worker threads of a scan or sweep
    (the first caller runs the control, the others wait for its answer)."""
    memo: dict[str | None, Gate] = {}
    lock = threading.Lock()

    def provider(tool: str | None) -> Gate:
        if tool is None:
            return no_sanitizer_gate(None)
        with lock:
            if tool not in memo:
                memo[tool] = _gate_for(home, target, tool, log_dir)
            return memo[tool]

    return provider


def _gate_for(home: Path, target: Target, tool: str, log_dir: Path) -> Gate:
    try:
        ensure_control(home, target.environment, tool, target.sanitizer, log_dir)
    except Exception as exc:  # a control that cannot run is a reason, never a crash
        return Gate(False, f"{tool}'s control could not run on this machine: {exc}")
    return not_reproduced_gate(home, target.environment.key(), tool)
