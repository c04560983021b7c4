"""Compile a canary to a cubin and launch it once: the program compute-sanitizer watches.

``python -m kvdiag.controls.launch NAME`` compiles ``repro/canaries/NAME.cu``
(cached, see :func:`compile_canary`), allocates ``in`` and ``out`` with a plain
device allocation of exactly ``n`` floats each (never a pool: a pool's larger
chunk would hide the out-of-bounds write from memcheck and the never-written
input from initcheck), memsets ``in`` unless the catalogue says not to, launches
the kernel, synchronises and copies ``out`` back. The last line on stdout is one
JSON object saying which launcher ran::

    {"launcher": "pycuda", "kernel": "oob_write", "ok": true, ...}

The launch goes through **pycuda** (driver API) and falls back to **cupy** when
pycuda is not importable (``--launcher`` forces one). With neither, the doctor
builds each canary into a small host program instead (:meth:`Compiler.executable`,
``repro/canaries/host/canary_main.cu``), which prints the same JSON line. A positive canary under
its tool often ends in a CUDA error (memcheck destroys the context after an
invalid write); that is reported as ``"ok": false`` with the error and exit 1,
and the doctor judges the sanitizer's log, not this exit status.

Exit codes: 0 launched and synchronised; 1 a CUDA error was raised;
2 usage (unknown canary, bad option); 3 neither pycuda nor cupy is importable;
4 the canary could not be compiled (or its cubin is missing).

The doctor compiles first and passes ``--cubin``, so nvcc never runs under the
sanitizer; compiling here is for running a canary by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvdiag.controls.canaries import CANARIES, CANARY_DIR, Canary, MarkerError
from kvdiag.errors import CompileError
from kvdiag.fileio import parse_json

__all__ = [
    "DEFAULT_ARCH",
    "EXIT_COMPILE",
    "EXIT_CUDA_ERROR",
    "EXIT_NO_LAUNCHER",
    "EXIT_OK",
    "EXIT_USAGE",
    "LAUNCHERS",
    "NATIVE_LAUNCHER",
    "CompileError",
    "Compiler",
    "LaunchOutcome",
    "arch_for",
    "available_launchers",
    "compile_canary",
    "cubin_cache_dir",
    "find_nvcc",
    "main",
    "canary_program",
    "native_argv",
    "nvcc_version",
    "parse_launcher_line",
]

DEFAULT_ARCH = "sm_90"
LAUNCHERS = ("pycuda", "cupy")
#: what the launcher line names when the canary ran as an nvcc-built program
NATIVE_LAUNCHER = "nvcc-exe"
HOST_MAIN = CANARY_DIR / "host" / "canary_main.cu"
NVCC_FLAGS = ("-cubin", "-lineinfo")
COMPILE_TIMEOUT_S = 120.0
NVCC_VERSION_TIMEOUT_S = 30.0

EXIT_OK = 0
EXIT_CUDA_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_LAUNCHER = 3
EXIT_COMPILE = 4


# --------------------------------------------------------------------------- compile


def find_nvcc() -> Path | None:
    """nvcc on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin."""
    from kvdiag.workspace.host import find_cuda_tool

    return find_cuda_tool("nvcc")


def nvcc_version(nvcc: Path, *, log_dir: Path) -> str | None:
    """``13.0.88`` from ``nvcc --version`` (run through kvdiag's subprocess layer)."""
    from kvdiag.proc.runner import run_command
    from kvdiag.workspace.host import parse_nvcc_version

    result = run_command([os.fspath(nvcc), "--version"], timeout=NVCC_VERSION_TIMEOUT_S,
                         log_dir=log_dir, name="nvcc-version")
    if not result.ok:
        return None
    return parse_nvcc_version(result.combined_text())


def arch_for(compute_capability) -> str:
    """``(9, 0)`` / ``"9.0"`` / ``"90"`` -> ``sm_90``; None or junk -> :data:`DEFAULT_ARCH`."""
    cc = compute_capability
    try:
        if isinstance(cc, (tuple, list)) and len(cc) >= 2:
            return f"sm_{int(cc[0])}{int(cc[1])}"
        if isinstance(cc, str) and cc:
            if "." in cc:
                major, minor = cc.split(".", 1)
                return f"sm_{int(major)}{int(minor)}"
            if cc.isdigit() and len(cc) >= 2:
                return f"sm_{cc}"
    except (TypeError, ValueError):
        pass
    return DEFAULT_ARCH


def cubin_cache_dir(home: Path, arch: str, nvcc_ver: str | None) -> Path:
    """``<home>/canaries/<arch>-nvcc<version>``: one folder per (arch, toolkit)."""
    return Path(home) / "canaries" / f"{arch}-nvcc{nvcc_ver or 'unknown'}"


def _source_hash(source: Path, arch: str) -> str:
    h = hashlib.sha256()
    h.update(source.read_bytes())
    h.update("\0".join((arch, *NVCC_FLAGS)).encode())
    return h.hexdigest()[:16]


@dataclass
class Compiler:
    """nvcc for one arch, its version asked once; cubins cached under ``home``."""

    home: Path
    arch: str = DEFAULT_ARCH
    nvcc: Path | None = None
    log_dir: Path | None = None
    _version: str | None = None
    _version_known: bool = False

    def _canaries(self) -> Path:
        """``<home>/canaries``, created and checked as every folder of the home is (kvdiag.home)."""
        from kvdiag.home import home_folder

        return home_folder(self.home, "canaries")

    def _logs(self) -> Path:
        d = self.log_dir or (self._canaries() / "logs")
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _nvcc(self) -> Path:
        if self.nvcc is None:
            self.nvcc = find_nvcc()
        if self.nvcc is None:
            raise CompileError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): "
                               "the canaries cannot be compiled")
        return self.nvcc

    def version(self) -> str | None:
        if not self._version_known:
            from kvdiag.proc.runner import CommandNotFound

            try:
                self._version = nvcc_version(self._nvcc(), log_dir=self._logs())
            except CommandNotFound as exc:
                raise CompileError(f"nvcc cannot be run: {exc}") from None
            self._version_known = True
        return self._version

    def cubin_path(self, c: Canary) -> Path:
        """Where ``c``'s cubin for this arch and toolkit lives (existing or not)."""
        directory = cubin_cache_dir(self.home, self.arch, self.version())
        return directory / f"{c.name}-{_source_hash(c.source, self.arch)}.cubin"

    def compile(self, c: Canary) -> Path:
        """The cubin of ``c``: from the cache, or ``nvcc -cubin -arch=ARCH -lineinfo``."""
        if not c.source.is_file():
            raise CompileError(f"canary source {c.source} is missing")
        return self._build(self.cubin_path(c), [*NVCC_FLAGS, f"-arch={self.arch}"], c.source,
                           f"nvcc-{c.name}-{self.arch}", c.filename)

    def executable_path(self, c: Canary) -> Path:
        """Where ``c``'s host executable (see :meth:`executable`) for this arch and toolkit lives."""
        directory = cubin_cache_dir(self.home, self.arch, self.version())
        h = hashlib.sha256(_source_hash(c.source, self.arch).encode())
        h.update(HOST_MAIN.read_bytes() if HOST_MAIN.is_file() else b"")
        return directory / f"{c.name}-{h.hexdigest()[:16]}.exe"

    def executable(self, c: Canary) -> Path:
        """``c`` built with ``repro/canaries/host/canary_main.cu`` into a program that launches it
        (no pycuda or cupy needed); cached like the cubins."""
        for source in (c.source, HOST_MAIN):
            if not source.is_file():
                raise CompileError(f"canary source {source} is missing")
        flags = ["-lineinfo", f"-arch={self.arch}", "-I", os.fspath(c.source.parent),
                 f"-DKVDIAG_KERNEL={c.name}", f'-DKVDIAG_CANARY_SOURCE="{c.filename}"']
        return self._build(self.executable_path(c), flags, HOST_MAIN, f"nvcc-exe-{c.name}-{self.arch}", c.filename)

    def _build(self, target: Path, flags: list[str], source: Path, log_name: str, shown: str) -> Path:
        """``nvcc FLAGS -o target source`` unless ``target`` is already cached; written atomically."""
        from kvdiag.proc.runner import CommandNotFound, run_command

        self._canaries()             # the programs kept there are run: only you may write them
        if target.is_file() and target.stat().st_size > 0:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        argv = [os.fspath(self._nvcc()), *flags, "-o", os.fspath(partial), os.fspath(source)]
        try:
            result = run_command(argv, timeout=COMPILE_TIMEOUT_S, log_dir=self._logs(), name=log_name)
        except CommandNotFound as exc:
            raise CompileError(f"nvcc cannot be run: {exc}") from None
        if not result.ok or not partial.is_file():
            partial.unlink(missing_ok=True)
            tail = "\n".join(result.combined_text().strip().splitlines()[-8:])
            raise CompileError(f"nvcc failed on {shown} for {self.arch} ({result.describe()}); "
                               f"log: {result.combined_path}\n{tail}".rstrip())
        os.replace(partial, target)
        return target


def canary_program(c: Canary, built: Path, native: bool) -> list[str]:
    """The argv compute-sanitizer runs: ``built`` is the canary's host executable when ``native``,
    else its cubin, launched by this module through pycuda or cupy."""
    if native:
        return native_argv(c, built)
    return [sys.executable, "-m", "kvdiag.controls.launch", c.name, "--cubin", os.fspath(built)]


def native_argv(c: Canary, executable: Path) -> list[str]:
    """The argv that launches ``c`` through its host executable (geometry from the catalogue)."""
    return [os.fspath(executable), str(c.n), *(str(v) for v in c.block), *(str(v) for v in c.grid),
            "1" if c.init_input else "0"]


def compile_canary(c: Canary, *, home: Path, arch: str = DEFAULT_ARCH, nvcc: Path | None = None,
                   log_dir: Path | None = None) -> Path:
    """Compile one canary (or take it from the cache); :class:`CompileError` on failure."""
    return Compiler(home=Path(home), arch=arch, nvcc=nvcc, log_dir=log_dir).compile(c)


# --------------------------------------------------------------------------- launch


@dataclass(frozen=True)
class LaunchOutcome:
    launcher: str
    kernel: str
    ok: bool
    error: str | None = None
    checksum: float | None = None

    def to_line(self, **extra) -> str:
        doc = {"launcher": self.launcher, "kernel": self.kernel, "ok": self.ok}
        if self.error is not None:
            doc["error"] = self.error
        if self.checksum is not None:
            doc["checksum"] = self.checksum
        doc.update(extra)
        return json.dumps(doc, sort_keys=False)


def parse_launcher_line(stdout: str) -> dict | None:
    """The launcher's final JSON line in a captured stdout, None when it never printed one."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and '"launcher"' in line:
            try:
                doc = parse_json(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and "launcher" in doc and "ok" in doc:
                return doc
    return None


def available_launchers() -> dict[str, str | None]:
    """``{"pycuda": None, "cupy": "No module named 'cupy'"}``: None when importable, else why not."""
    out: dict[str, str | None] = {}
    for name, module in (("pycuda", "pycuda.driver"), ("cupy", "cupy")):
        try:
            __import__(module)
        except Exception as exc:  # ImportError, or a broken install raising something else
            out[name] = f"{type(exc).__name__}: {exc}"
        else:
            out[name] = None
    return out


def _pick_launcher(wanted: str) -> tuple[str | None, str]:
    """(launcher, why) for ``wanted`` in auto|pycuda|cupy; launcher None when none is importable."""
    order = LAUNCHERS if wanted == "auto" else (wanted,)
    reasons = []
    for name in order:
        module = "pycuda.driver" if name == "pycuda" else "cupy"
        try:
            __import__(module)
        except Exception as exc:
            reasons.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        return name, ""
    return None, "; ".join(reasons)


def _device_arch_pycuda(device: int) -> str:
    import pycuda.driver as drv

    drv.init()
    return arch_for(drv.Device(device).compute_capability())


def _device_arch_cupy(device: int) -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device)
    return arch_for((props["major"], props["minor"]))


def _run_pycuda(c: Canary, cubin: Path, device: int) -> LaunchOutcome:
    import numpy as np
    import pycuda.driver as drv

    drv.init()
    ctx = drv.Device(device).make_context()
    allocations = []
    try:
        module = drv.module_from_file(os.fspath(cubin))
        function = module.get_function(c.name)
        nbytes = c.n * 4
        d_in = drv.mem_alloc(nbytes)       # cuMemAlloc: exactly n floats, no pool
        d_out = drv.mem_alloc(nbytes)
        allocations += [d_in, d_out]
        if c.init_input:
            drv.memset_d32(d_in, 0, c.n)
        function(d_in, d_out, np.int32(c.n), block=tuple(c.block), grid=tuple(c.grid))
        ctx.synchronize()
        host = np.empty(c.n, dtype=np.float32)
        drv.memcpy_dtoh(host, d_out)
        return LaunchOutcome("pycuda", c.name, True, checksum=float(host.sum()))
    except Exception as exc:
        return LaunchOutcome("pycuda", c.name, False, error=f"{type(exc).__name__}: {exc}")
    finally:
        for a in allocations:
            try:
                a.free()
            except Exception:
                pass
        try:
            ctx.pop()
            ctx.detach()
        except Exception:
            pass


def _run_cupy(c: Canary, cubin: Path, device: int) -> LaunchOutcome:
    import cupy
    import numpy as np
    from cupy.cuda import runtime

    pointers = []
    try:
        with cupy.cuda.Device(device):
            module = cupy.RawModule(path=os.fspath(cubin))
            function = module.get_function(c.name)
            nbytes = c.n * 4
            # cudaMalloc directly: cupy.empty would take a pooled chunk larger than n floats.
            d_in = runtime.malloc(nbytes)
            pointers.append(d_in)
            d_out = runtime.malloc(nbytes)
            pointers.append(d_out)
            if c.init_input:
                runtime.memset(d_in, 0, nbytes)

            def wrap(ptr: int):
                mem = cupy.cuda.UnownedMemory(ptr, nbytes, None, device)
                return cupy.ndarray((c.n,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))

            a_in, a_out = wrap(d_in), wrap(d_out)
            function(tuple(c.grid), tuple(c.block), (a_in, a_out, np.int32(c.n)))
            runtime.deviceSynchronize()
            host = a_out.get()
            return LaunchOutcome("cupy", c.name, True, checksum=float(host.sum()))
    except Exception as exc:
        return LaunchOutcome("cupy", c.name, False, error=f"{type(exc).__name__}: {exc}")
    finally:
        for p in pointers:
            try:
                runtime.free(p)
            except Exception:
                pass


_RUNNERS = {"pycuda": _run_pycuda, "cupy": _run_cupy}
_ARCH_QUERIES = {"pycuda": _device_arch_pycuda, "cupy": _device_arch_cupy}


# --------------------------------------------------------------------------- CLI


def _print_list(as_json: bool) -> None:
    rows = [c.to_dict() for c in CANARIES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'canary':<20} {'tool':<10} {'role':<9} {'twin':<20} expected")
    for r in rows:
        if r["role"] == "positive":
            where = f"{r['expected_kind']} at {r['expected_file']}:{r['expected_line']}"
        else:
            where = "0 errors"
        if r.get("problem"):
            where = f"BROKEN: {r['problem']}"
        print(f"{r['name']:<20} {r['tool']:<10} {r['role']:<9} {r['twin']:<20} {where}")


def _default_home() -> Path:
    from kvdiag.home import kvdiag_home

    return kvdiag_home()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvdiag.controls.launch",
        description="Compile and launch one kvdiag canary kernel (what compute-sanitizer watches).")
    parser.add_argument("name", nargs="?", help="canary name (see --list)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--json", action="store_true", help="with --list: as JSON")
    parser.add_argument("--cubin", type=Path, help="an already compiled cubin (nothing is compiled)")
    parser.add_argument("--arch", help=f"sm_XX to compile for (default: the device's, else {DEFAULT_ARCH})")
    parser.add_argument("--home", type=Path, help="kvdiag home for the cubin cache (default: $KVDIAG_HOME or ~/.kvdiag)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    parser.add_argument("--launcher", choices=("auto", *LAUNCHERS), default=os.environ.get("KVDIAG_LAUNCHER", "auto"),
                        help="pycuda, cupy, or auto: pycuda, else cupy (env KVDIAG_LAUNCHER)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK

    if args.list:
        _print_list(args.json)
        return EXIT_OK
    if not args.name:
        print("launch: a canary name is needed (see --list)", file=sys.stderr)
        return EXIT_USAGE
    c = CANARIES.get(args.name)
    if c is None:
        print(f"launch: unknown canary {args.name!r}; known: {', '.join(CANARIES)}", file=sys.stderr)
        return EXIT_USAGE

    launcher, why = _pick_launcher(args.launcher)
    if launcher is None:
        print(f"launch: no launcher: neither pycuda nor cupy is importable ({why})", file=sys.stderr)
        print(json.dumps({"launcher": None, "kernel": c.name, "ok": False, "error": f"no launcher: {why}"}))
        return EXIT_NO_LAUNCHER

    if args.cubin is not None:
        cubin = args.cubin
        if not cubin.is_file():
            print(f"launch: cubin {cubin} does not exist", file=sys.stderr)
            return EXIT_COMPILE
        arch = args.arch
    else:
        arch = args.arch
        if arch is None:
            try:
                arch = _ARCH_QUERIES[launcher](args.device)
            except Exception:
                arch = DEFAULT_ARCH
        try:
            c.expected_line()  # a broken marker is a broken canary: say so before compiling
            cubin = compile_canary(c, home=args.home or _default_home(), arch=arch)
        except (CompileError, MarkerError, OSError) as exc:
            print(f"launch: {exc}", file=sys.stderr)
            return EXIT_COMPILE

    outcome = _RUNNERS[launcher](c, cubin, args.device)
    if outcome.error:
        print(f"launch: {c.name}: {outcome.error}", file=sys.stderr)
    sys.stdout.flush()
    print(outcome.to_line(arch=arch, block=list(c.block), grid=list(c.grid), n=c.n,
                          init_input=c.init_input), flush=True)
    return EXIT_OK if outcome.ok else EXIT_CUDA_ERROR


if __name__ == "__main__":
    sys.exit(main())
