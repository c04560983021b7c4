"""The kernel instantiations compiled into a build: ``cuobjdump -symbols`` (else ``nm -C``) of its CUDA library.

A verdict that rests on "the kernel ran under the detector and nothing was found" must
first know the kernel exists in this build: a build without the instantiation cannot have
the defect there (not-applicable, quoting this listing), and one with it that did not
launch it proves nothing (inconclusive). The listing is memoised per library file (size
and time), as a big library takes seconds to list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvdiag.parse.symbols import cuobjdump_entries, demangled_kernels, nm_kernels
from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.workspace.host import find_cuda_tool

LIST_TIMEOUT_S = 300.0
DEMANGLE_CHUNK = 400          # names per c++filt call (argv stays far below ARG_MAX)
_LIBRARY_GLOBS = ("bin/libggml-cuda.so*", "lib/libggml-cuda.so*", "src/ggml-cuda/libggml-cuda.so*",
                  "ggml/src/ggml-cuda/libggml-cuda.so*", "src/ggml-cuda/libggml-cuda.a",
                  "ggml/src/ggml-cuda/libggml-cuda.a")


@dataclass(frozen=True)
class KernelSymbols:
    """What one listing found: the canonical kernels, the file and the tool, or why there is none."""

    library: str | None
    tool: str | None
    kernels: tuple[str, ...] = ()
    why_not: str | None = None

    @property
    def listed(self) -> bool:
        return self.why_not is None

    def has(self, kernel: str) -> bool:
        return kernel in self.kernels

    def describe(self) -> str:
        if not self.listed:
            return f"kernel symbols not listed: {self.why_not}"
        return f"{len(self.kernels)} kernel symbol(s) in {Path(self.library).name} ({self.tool})"

    def to_dict(self) -> dict:
        return {"library": self.library, "tool": self.tool, "kernels": len(self.kernels), "why_not": self.why_not}

    def to_record(self) -> dict:
        """Everything, for the memo (kvdiag.workspace.memo keeps JSON)."""
        return {"library": self.library, "tool": self.tool, "kernels": list(self.kernels), "why_not": self.why_not}

    @classmethod
    def from_record(cls, data: dict) -> "KernelSymbols":
        return cls(library=data["library"], tool=data["tool"], kernels=tuple(data["kernels"]),
                   why_not=data["why_not"])


def cuda_library(build_dir: Path, program: Path | None = None) -> Path | None:
    """The build's ggml-cuda library; a program linked statically holds its kernels itself."""
    for pattern in _LIBRARY_GLOBS:
        found = sorted(p for p in build_dir.glob(pattern) if p.is_file() and not p.is_symlink())
        if found:
            return found[0]
    return program if program is not None and program.is_file() else None


def list_kernels(library: Path, *, log_dir: Path) -> KernelSymbols:
    """The kernels of ``library``: cuobjdump's ENTRY symbols demangled by c++filt, else nm -C's."""
    cuobjdump = find_cuda_tool("cuobjdump")
    if cuobjdump is None:
        return _from_nm(library, log_dir)
    listed = _from_cuobjdump(cuobjdump, library, log_dir)
    if listed.listed:
        return listed
    fallback = _from_nm(library, log_dir)   # the listing says why cuobjdump's was not used
    return replace(fallback, tool=f"{fallback.tool}; cuobjdump gave none: {listed.why_not}")


def _from_cuobjdump(cuobjdump: Path, library: Path, log_dir: Path) -> KernelSymbols:
    result = run_command([str(cuobjdump), "-symbols", str(library)], timeout=LIST_TIMEOUT_S, log_dir=log_dir,
                         name="cuobjdump-symbols")
    if not result.ok:
        return KernelSymbols(str(library), "cuobjdump", why_not=f"cuobjdump -symbols: {result.describe()}")
    mangled = cuobjdump_entries(result.stdout_text())
    if not mangled:
        return KernelSymbols(str(library), "cuobjdump", why_not="cuobjdump listed no kernel (no fatbin?)")
    kernels: list[str] = []
    for start in range(0, len(mangled), DEMANGLE_CHUNK):
        chunk = list(mangled[start:start + DEMANGLE_CHUNK])
        try:
            out = run_command(["c++filt", *chunk], timeout=LIST_TIMEOUT_S, log_dir=log_dir, name="cxxfilt")
        except CommandNotFound as exc:
            return KernelSymbols(str(library), "cuobjdump", why_not=f"c++filt: {exc}")
        kernels.extend(demangled_kernels(out.stdout_text()))
    return KernelSymbols(str(library), "cuobjdump -symbols | c++filt", tuple(dict.fromkeys(kernels)))


def _from_nm(library: Path, log_dir: Path) -> KernelSymbols:
    try:
        result = run_command(["nm", "-C", "--defined-only", str(library)], timeout=LIST_TIMEOUT_S,
                             log_dir=log_dir, name="nm-symbols")
    except CommandNotFound as exc:
        return KernelSymbols(str(library), None, why_not=f"neither cuobjdump nor nm is available ({exc})")
    if not result.ok:
        return KernelSymbols(str(library), "nm -C", why_not=f"nm -C: {result.describe()}")
    kernels = nm_kernels(result.stdout_text())
    if not kernels:
        return KernelSymbols(str(library), "nm -C", why_not="nm listed no symbol (a stripped library?)")
    return KernelSymbols(str(library), "nm -C (host launch stubs)", kernels)
