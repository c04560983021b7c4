"""The benchmarks' preloaded shims (benchmarks/shims/), compiled as their headers say, for the tests that stage them."""

from __future__ import annotations

import subprocess
from pathlib import Path

SHIMS = Path(__file__).resolve().parents[2] / "benchmarks" / "shims"


def compiled_shim(name: str, into: Path) -> Path:
    """benchmarks/shims/NAME.c as a shared library in ``into``, every warning an error."""
    shim = into / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(shim), str(SHIMS / f"{name}.c"),
                    "-ldl"], check=True, timeout=120)
    return shim
