"""What the user's build and GPU are: the build dir, the test program's flags, the GPU and tools.

Everything external runs through :mod:`kvdiag.proc.runner`; a missing tool or GPU is
recorded, never raised (only a path that is not a build at all is a UsageError).
"""

from kvdiag.workspace.build import (
    BackendOpsInfo,
    BuildInfo,
    GitState,
    Staleness,
    check_build_staleness,
    find_binaries,
    git_state,
    inspect_build,
    parse_cmake_cache,
    probe_backend_ops,
)
from kvdiag.workspace.gpu import GpuDevice, GpuFingerprint, fingerprint_gpu
from kvdiag.workspace.host import Environment, HostInfo, ToolVersions, fingerprint_environment

__all__ = [
    "BackendOpsInfo",
    "BuildInfo",
    "Environment",
    "GitState",
    "GpuDevice",
    "GpuFingerprint",
    "HostInfo",
    "Staleness",
    "ToolVersions",
    "check_build_staleness",
    "find_binaries",
    "fingerprint_environment",
    "fingerprint_gpu",
    "git_state",
    "inspect_build",
    "parse_cmake_cache",
    "probe_backend_ops",
]
