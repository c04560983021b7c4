"""Probes: patch files applied to a scratch worktree of the user's source.

* :mod:`kvdiag.probes.patch` -- probe files: header parsing and validation (:class:`Probe`, :func:`load_probes`).
* :mod:`kvdiag.probes.worktree` -- scratch ``git worktree``s, removed on success, failure and Ctrl-C;
  ``git apply [--check] [-R] [--directory=ggml]`` of one probe.
* :mod:`kvdiag.probes.stack` -- ordered stacks (``requires``), and which probe conflicts with what.
"""

from kvdiag.probes.patch import (
    KINDS,
    Probe,
    ProbeError,
    ProbeFileError,
    ProbeSet,
    default_probes_dir,
    load_probes,
    parse_probe_file,
)
from kvdiag.probes.stack import Conflict, StackCheck, StackCycle, check_stack, order_stack
from kvdiag.probes.worktree import (
    RECORD_FILE,
    ApplyResult,
    Worktree,
    WorktreeError,
    add_worktree,
    apply_directory,
    apply_stack,
    porcelain_status,
    read_record,
    remove_worktree,
    resolve_commit,
    scratch_worktree,
)

__all__ = [
    "KINDS",
    "Probe",
    "ProbeError",
    "ProbeFileError",
    "ProbeSet",
    "default_probes_dir",
    "load_probes",
    "parse_probe_file",
    "Conflict",
    "StackCheck",
    "StackCycle",
    "check_stack",
    "order_stack",
    "RECORD_FILE",
    "ApplyResult",
    "Worktree",
    "WorktreeError",
    "add_worktree",
    "apply_directory",
    "apply_stack",
    "porcelain_status",
    "read_record",
    "remove_worktree",
    "resolve_commit",
    "scratch_worktree",
]
