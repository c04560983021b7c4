"""Listing a build's kernels with the tools the machine has: cuobjdump first, nm as the fallback that says why.

On the H200 (device session 7) cuobjdump 13.0 printed a spelling kvdiag did not read then, so the
listing fell back to nm and the verdict never said so. A stand-in cuobjdump on PATH (a script that
prints a listing without kernels, or the H200's real one) and GNU nm over a small shared library
made here show both paths.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from kvdiag.workspace.kernel_symbols import list_kernels

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200_LISTING = FIXTURES / "device" / "h200-session7" / "na-cuobjdump-symbols.stdout.log.gz"

pytestmark = pytest.mark.skipif(not (shutil.which("cc") and shutil.which("nm") and shutil.which("c++filt")),
                                reason="needs a C compiler, GNU nm and c++filt")


def _library(folder: Path) -> Path:
    source = folder / "stub.c"
    source.write_text("void host_only_function(void) {}\n")
    library = folder / "libggml-cuda.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def _cuobjdump(folder: Path, listing: Path) -> None:
    tool = folder / "bin" / "cuobjdump"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat '{listing}'\n")
    tool.chmod(0o755)


def test_a_cuobjdump_listing_without_kernels_falls_back_to_nm_and_says_why(tmp_path, monkeypatch):
    empty = tmp_path / "empty.txt"
    empty.write_text("\nFatbin elf code:\n================\narch = sm_90\n\nsymbols:\n")
    _cuobjdump(tmp_path, empty)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{shutil.which('nm').rsplit('/', 1)[0]}")
    listed = list_kernels(_library(tmp_path), log_dir=tmp_path / "logs")
    assert listed.listed and "host_only_function" in listed.kernels
    assert listed.tool == "nm -C (host launch stubs); cuobjdump gave none: cuobjdump listed no kernel (no fatbin?)"


def test_the_h200s_cuobjdump_13_0_listing_is_read_without_falling_back(tmp_path, monkeypatch):
    listing = tmp_path / "h200.txt"
    listing.write_bytes(gzip.decompress(H200_LISTING.read_bytes()))
    _cuobjdump(tmp_path, listing)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{shutil.which('c++filt').rsplit('/', 1)[0]}")
    listed = list_kernels(_library(tmp_path), log_dir=tmp_path / "logs")
    assert listed.tool == "cuobjdump -symbols | c++filt"
    assert "flash_attn_ext_f16<576, 512, 2, 4, false, true>" in listed.kernels
    assert sum(k.startswith("flash_attn_ext_f16<") for k in listed.kernels) == 16
