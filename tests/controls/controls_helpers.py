"""Shared helpers for the tests of kvdiag.controls: fixture logs, fake machines, fake tools.

Kept out of a conftest.py on purpose: other test folders import their own
``conftest`` by that plain name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from kvdiag.controls.canaries import CANARIES, pair_for
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint
from kvdiag.workspace.host import Environment, HostInfo, ToolVersions

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
FAKE_SANITIZER = HERE.parent / "scenarios" / "fake_compute_sanitizer.py"   # its `recorded` mode
FAKE_NVCC = HERE / "fake_nvcc.py"

_TOKEN = re.compile(r"@EXPECT(?:\+(\d+))?@")


def fixture_log(name: str, tool: str) -> str:
    """A fixture log with ``@EXPECT@`` / ``@EXPECT+N@`` replaced by ``tool``'s expected line."""
    line = pair_for(tool).positive.expected_line()
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return _TOKEN.sub(lambda m: str(line + int(m.group(1) or 0)), text)


def ok_launcher(name: str, launcher: str = "cupy") -> dict:
    return {"launcher": launcher, "kernel": name, "ok": True}


def make_env(*, gpu: bool = True, driver: str | None = "580.159.04", nvcc: str | None = "13.0.88",
             sanitizer: str | None = "2025.3.1.0", sanitizer_path: str | None = None,
             nvcc_path: str | None = None, runtime: str | None = "13.0") -> Environment:
    """A real ``Environment`` describing an imagined machine (H200 by default)."""
    devices = (GpuDevice(index=0, name="NVIDIA H200", uuid=None, compute_capability=(9, 0), sm_count=132,
                         total_memory_bytes=143_771 * 2**20, pci_bus_id=None),) if gpu else ()
    return Environment(
        host=HostInfo(hostname="test", os="Linux", python=sys.version.split()[0], cpu=None, cpu_count=1),
        gpu=GpuFingerprint(source="pycuda" if gpu else "none", devices=devices, driver_version=driver,
                           driver_cuda_version="13.0" if driver else None, runtime_version=runtime,
                           visible_devices=None, notes=() if gpu else ("no source reported a device",)),
        tools=ToolVersions(nvcc=nvcc, compute_sanitizer=sanitizer, compute_sanitizer_path=sanitizer_path,
                           nvcc_path=nvcc_path),
        kvdiag_version="test",
    )


def install_fake_sanitizer_logs(directory: Path, scenario: dict[str, tuple[str, bool]]) -> None:
    """Write ``<canary>.log`` (+ ``<canary>.launcher`` = ok|none) for the fake compute-sanitizer to replay.

    ``scenario`` maps a canary name to (fixture file, launcher ran ok).
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name, (fixture, launched) in scenario.items():
        c = CANARIES[name]
        (directory / f"{name}.log").write_text(fixture_log(fixture, c.tool), encoding="utf-8")
        (directory / f"{name}.launcher").write_text("ok" if launched else "none", encoding="utf-8")
