"""kvdiag's launch lister: a CUPTI injection library, built on this machine, that names each kernel launched.

The launch probe (``probes/test-backend-ops-launch.patch``) lists launches by patching
``tests/test-backend-ops.cpp``, which fails on trees older or newer than the patch.
The lister does not depend on the program's source: the CUDA driver loads the
library into any CUDA program whose environment names it in ``CUDA_INJECTION64_PATH``
(test-backend-ops of any era, llama-server), and CUPTI calls it on every launch,
whether the program links the CUDA runtime statically or not (an ``LD_PRELOAD``
interposer of ``cudaLaunchKernel`` sees only a shared runtime, and misses CUDA 13's
``__cudaLaunchKernel`` unless it knows that name). It prints the same
``kvdiag-launch: <kernel>`` lines as the probe, so everything downstream reads both.

It is compiled from ``repro/launches/kvdiag_launches.cpp`` with the toolkit's nvcc
against the toolkit's CUPTI (``extras/CUPTI`` in a runfile install, ``include`` and
``lib64`` or ``targets/<arch>-linux`` in packaged ones), once per toolkit and source,
under ``$KVDIAG_HOME/launch-lister/``. Anything missing is a reason, never an error:
the run then lists launches with the probe, or not at all, and says so.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.resources import data_path
from kvdiag.workspace.host import CUDA_HOME_VARS, DEFAULT_CUDA_HOME, find_cuda_tool

__all__ = ["LISTER_DISABLE_ENV", "LISTER_NAME", "LauncherLibrary", "build_lister", "cupti_dirs", "exported_symbols",
           "lister_source"]

LISTER_NAME = "CUPTI injection"
LISTER_DISABLE_ENV = "KVDIAG_LAUNCH_LISTER"          # "0": never build or use it
LIBRARY = "libkvdiag_launches.so"
COMPILE_TIMEOUT_S = 180.0
_INCLUDE_DIRS = ("extras/CUPTI/include", "include", "targets/x86_64-linux/include", "targets/sbsa-linux/include")
_LIB_DIRS = ("extras/CUPTI/lib64", "lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")
_WRAPPED = re.compile(r"exec\s+\"?(/[^\s\"]+/bin/nvcc)\"?")


@dataclass(frozen=True)
class LauncherLibrary:
    """The built library, or why there is none."""

    path: Path | None
    why_not: str | None = None
    toolkit: str | None = None         # the toolkit root it was built against

    @property
    def available(self) -> bool:
        return self.path is not None and self.path.is_file()


def lister_source() -> Path:
    return data_path("repro/launches/kvdiag_launches.cpp")


def _toolkit_roots(nvcc: Path | None) -> list[Path]:
    """Where the toolkit may live: nvcc's own folder's parent (through a wrapper script that execs the
    real nvcc, as Debian's /usr/local/bin/nvcc does), $CUDA_HOME/$CUDA_PATH, /usr/local/cuda."""
    roots: list[Path] = []
    if nvcc is not None:
        real = Path(os.path.realpath(nvcc))
        roots.append(real.parent.parent)
        try:
            head = real.read_bytes()[:512].decode("utf-8", "replace") if real.stat().st_size < 4096 else ""
        except OSError:
            head = ""
        wrapped = _WRAPPED.search(head)
        if wrapped:
            roots.insert(0, Path(wrapped.group(1)).parent.parent)
    roots += [Path(os.environ[v]) for v in CUDA_HOME_VARS if os.environ.get(v)] + [DEFAULT_CUDA_HOME]
    return list(dict.fromkeys(roots))


def cupti_dirs(roots: list[Path]) -> tuple[Path, Path] | None:
    """``(include dir holding cupti.h, lib dir holding libcupti.so)`` of the first root that has both."""
    for root in roots:
        include = next((root / d for d in _INCLUDE_DIRS if (root / d / "cupti.h").is_file()), None)
        lib = next((root / d for d in _LIB_DIRS if any((root / d).glob("libcupti.so*"))), None)
        if include is not None and lib is not None:
            return include, lib
    return None


def build_lister(home: Path, *, log_dir: Path) -> LauncherLibrary:
    """The lister for this machine's toolkit: from the cache, else compiled now (about 2 s)."""
    if os.environ.get(LISTER_DISABLE_ENV, "").strip() == "0":
        return LauncherLibrary(None, f"{LISTER_DISABLE_ENV}=0")
    source = lister_source()
    if not source.is_file():
        return LauncherLibrary(None, f"the lister's source {source} is missing")
    nvcc = find_cuda_tool("nvcc")
    if nvcc is None:
        return LauncherLibrary(None, "no nvcc here (PATH, $CUDA_HOME) to build the CUPTI launch lister with")
    roots = _toolkit_roots(nvcc)
    dirs = cupti_dirs(roots)
    if dirs is None:
        return LauncherLibrary(None, "no CUPTI (cupti.h and libcupti.so) in " + ", ".join(str(r) for r in roots))
    include, lib = dirs
    key = hashlib.sha256(source.read_bytes() + f"\0{os.path.realpath(nvcc)}\0{include}\0{lib}".encode())
    out_dir = Path(home) / "launch-lister" / key.hexdigest()[:16]
    library = out_dir / LIBRARY
    if library.is_file():
        return LauncherLibrary(library, toolkit=str(include.parent))
    return _compile(nvcc, source, include, lib, library, log_dir)


def _compile(nvcc: Path, source: Path, include: Path, lib: Path, library: Path, log_dir: Path) -> LauncherLibrary:
    library.parent.mkdir(parents=True, exist_ok=True)
    partial = library.with_name(f"{library.name}.{os.getpid()}.part")
    argv = [str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-O2", "-std=c++17", f"-I{include}", "-o", str(partial),
            str(source), f"-L{lib}", "-lcupti", "-Xlinker", f"-rpath,{lib}"]
    try:
        result = run_command(argv, timeout=COMPILE_TIMEOUT_S, log_dir=log_dir, name="launch-lister-compile")
    except CommandNotFound as exc:
        return LauncherLibrary(None, f"could not run nvcc: {exc}")
    if not result.ok or not partial.is_file():
        partial.unlink(missing_ok=True)
        return LauncherLibrary(None, f"the CUPTI launch lister did not compile: {result.describe()}")
    os.replace(partial, library)          # another kvdiag building the same key writes the same bytes
    return LauncherLibrary(library, toolkit=str(include.parent))


def exported_symbols(library: Path, *, log_dir: Path) -> set[str] | None:
    """The dynamic symbols ``library`` defines (``nm -D --defined-only``), or None without nm."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    result = run_command([nm, "-D", "--defined-only", str(library)], timeout=30.0, log_dir=log_dir,
                         name="launch-lister-nm")
    if not result.ok:
        return None
    return {line.split()[-1] for line in result.stdout_text().splitlines() if line.split()}
