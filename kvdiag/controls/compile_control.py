"""The control for compile steps (D7): does this machine's CMake + ninja + nvcc flow show a
template mismatch as a matched, attributed error line?

A compile step that builds clean is only evidence that the defect is gone if the
same flow, here, would have shown it. The control stages a two-source CUDA
project and compiles it exactly as a compile step compiles the user's tree
(:class:`kvdiag.workspace.kept_build.KeptBuild`: configure, ``ninja -t query``,
``ninja -k 0``, same CUDA architectures and compiler launcher, logs through the
runner): ``stale_call.cu`` calls a function template with one argument too few, as
D7's stale call sites did, and must print ``stale_call.cu(LINE): error: no instance
of function template "process_tile" matches the argument list`` at the marked line;
``current_call.cu`` passes the full list and must compile to an object (a clean
compile is seen as clean).

The outcome is kept in ``controls.json`` under a key of the tool versions, the
architectures and the launcher: a new nvcc, CMake or ninja runs it again.
"""

from __future__ import annotations

import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from kvdiag.controls.cache import ControlRecord, gate_for_record, load_control, store_record
from kvdiag.controls.gate import Gate
from kvdiag.parse.compiler import compiler_errors
from kvdiag.proc.runner import CommandError, run_command
from kvdiag.workspace.kept_build import KeptBuild, KeptBuildKey

TOOL = "compile"
CONTROL_BUDGET_S = 300.0
EXPECTED_ERROR = re.compile(r'no instance of function template "process_tile" matches the argument list')

_CMAKELISTS = """cmake_minimum_required(VERSION 3.18)
project(kvdiag_compile_control LANGUAGES CUDA)
add_library(control OBJECT stale_call.cu current_call.cu)
"""

_HEADER = """#pragma once
// staged by kvdiag: the callee gained a parameter (as flash_attn_ext_f16_process_tile did)
template <int N>
__device__ void process_tile(const float * src, float * dst, float * meta, int n) {
    for (int i = threadIdx.x; i < n; i += N) { dst[i] = src[i]; }
    if (meta) { meta[0] = 1.0f; }
}
"""

_STALE = """#include "tile.cuh"
template <int N>
__global__ void stale_kernel(const float * src, float * dst, int n) {
    process_tile<N>(src, dst, n);  // KVDIAG-EXPECT: the old argument list, one argument short
}
template __global__ void stale_kernel<32>(const float *, float *, int);
"""

_CURRENT = """#include "tile.cuh"
template <int N>
__global__ void current_kernel(const float * src, float * dst, int n) {
    process_tile<N>(src, dst, nullptr, n);
}
template __global__ void current_kernel<32>(const float *, float *, int);
"""


def compile_control_gate(home: Path, log_dir: Path, defines: Mapping[str, str], launcher: str | None,
                         deadline: float | None = None, ninja: str = "ninja") -> Gate:
    """May a compile step that built clean say not-reproduced? Runs the control once per key,
    by ``deadline`` (monotonic; the step's budget covers its control) when given."""
    try:
        key = _environment_key(log_dir, defines, launcher, ninja)
    except CommandError as exc:
        return Gate(False, f"the compile control could not read the tool versions ({exc})")
    record = load_control(home, key, TOOL)
    if record is None:
        record = run_compile_control(key, log_dir, defines, launcher, deadline, ninja)
        if record.positive_detected is not None:
            store_record(home, record)
    return gate_for_record(TOOL, record)


def run_compile_control(key: str, log_dir: Path, defines: Mapping[str, str], launcher: str | None,
                        deadline: float | None = None, ninja: str = "ninja") -> ControlRecord:
    """Stage the project (sources and a CMakeLists.txt only: cmake and ``ninja`` write the rest),
    compile it through a scratch build, and judge what it printed. A control cut short by
    ``deadline`` is not passed (and, undetermined, not stored)."""
    wanted = {k: v for k, v in defines.items() if k in ("CMAKE_CUDA_ARCHITECTURES", "CMAKE_BUILD_TYPE")}
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="kvdiag-compile-control-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        files = {"CMakeLists.txt": _CMAKELISTS, "tile.cuh": _HEADER, "stale_call.cu": _STALE,
                 "current_call.cu": _CURRENT}
        for name, text in files.items():
            (source / name).write_text(text)
        expect_line = _STALE.splitlines().index(next(x for x in _STALE.splitlines() if "KVDIAG-EXPECT" in x)) + 1
        build = KeptBuild(Path(tmp) / "scratch", KeptBuildKey.make(source, None, wanted, launcher), ninja)
        run = build.compile_sources(["stale_call.cu", "current_call.cu"], log_dir=log_dir, name="compile-control",
                                    deadline=min(time.monotonic() + CONTROL_BUDGET_S,
                                             deadline if deadline is not None else float("inf")))
        if run.stopped or run.timed_out or not run.results:
            detail = run.stopped or run.results[-1].describe()
            return ControlRecord(key, TOOL, False, date, f"the control could not compile: {detail}",
                                 log_dir=str(log_dir))
        text = run.results[-1].combined_text()
        hits = [e for e in compiler_errors(text)
                if EXPECTED_ERROR.search(e.message) and e.file.endswith("stale_call.cu") and e.line == expect_line]
        current = [o for o in run.objects if "current_call" in o]
        current_built = bool(current) and all((build.path / o).is_file() for o in current)
        others = [e.raw for e in compiler_errors(text) if e not in hits]
    positive = bool(hits)
    negative = current_built and not others
    detail = (f"a staged stale call printed {hits[0].raw.split('/')[-1]!r}; the current call compiled clean"
              if positive and negative else "see the positive and negative details")
    return ControlRecord(
        key, TOOL, positive and negative, date, detail, versions={"key": key},
        positive_detected=positive,
        positive_detail=(f"{len(hits)} matched error line(s) at stale_call.cu({expect_line})" if positive else
                         f"no 'no instance of function template' error at stale_call.cu({expect_line}) in "
                         f"{run.results[-1].combined_path}"),
        negative_clean=negative,
        negative_detail=("current_call.cu compiled to an object" if negative else
                         f"current_call.cu did not compile clean: {others[:1] or 'no object'}"),
        log_dir=str(log_dir))


def _environment_key(log_dir: Path, defines: Mapping[str, str], launcher: str | None, ninja: str = "ninja") -> str:
    """The tool versions the control's outcome holds for (nvcc, cmake, ninja), the CUDA
    architectures and the launcher."""
    parts = [TOOL]
    for program, name in (("nvcc", "nvcc"), ("cmake", "cmake"), (ninja, "ninja")):
        result = run_command([program, "--version"], timeout=30, log_dir=log_dir, name=f"{name}-version")
        lines = [x.strip() for x in result.stdout_text().splitlines() if x.strip()]
        version = next((x for x in reversed(lines) if "release" in x or "version" in x), lines[-1] if lines else "?")
        parts.append(f"{name} {version}")
    parts.append(f"arch {defines.get('CMAKE_CUDA_ARCHITECTURES', 'default')}")
    parts.append(f"launcher {Path(launcher).name if launcher else 'none'}")
    return "|".join(parts)
