"""What the GPU-marked tests need from the machine, found once: the real compute-sanitizer
and nvcc (the device machine has both), and a scenario program compiled with it.

Each helper skips the calling test where the machine lacks the piece."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kvdiag.proc.sanitizer import find_sanitizer

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
_NVCC_FALLBACK = Path("/usr/local/cuda/bin/nvcc")


def real_sanitizer() -> Path:
    """compute-sanitizer on a machine with an NVIDIA driver, or skip."""
    try:
        san = find_sanitizer()
    except Exception:  # pragma: no cover - a broken KVDIAG_COMPUTE_SANITIZER
        san = None
    if san is None or shutil.which("nvidia-smi") is None:
        pytest.skip("no GPU or no compute-sanitizer here")
    return san


def compile_scenario(source: str, out_dir: Path, *flags: str) -> Path:
    """tests/scenarios/<source> built with nvcc into out_dir, or skip."""
    real_sanitizer()
    nvcc = shutil.which("nvcc") or (str(_NVCC_FALLBACK) if _NVCC_FALLBACK.exists() else None)
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    out = out_dir / Path(source).stem
    subprocess.run([nvcc, *flags, "-o", str(out), str(SCENARIOS / source)], check=True)
    return out
