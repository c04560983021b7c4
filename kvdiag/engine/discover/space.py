"""The suite's case space: every case test-backend-ops lists for the backend, by op.

One ``test-backend-ops support`` process lists the whole suite without running a kernel
(the same listing a scan uses for one op, engine.scan.cases.enumerate_cases). ``--ops`` narrows it
with test-backend-ops' own ``-o`` (a comma-separated list of op names), ``--params`` with its
``-p`` regex; a shard keeps the cases whose name falls to it (kvdiag.shards.case_shard), so
the shards of one discovery merge into the whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kvdiag.errors import CaseListingFailed, UsageError
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.proc.runner import run_command
from kvdiag.shards import Shard, case_shard

LIST_TIMEOUT_S = 300


@dataclass(frozen=True)
class SuiteSpace:
    """The supported cases per op (in the order test-backend-ops walks them) and what was set aside."""

    supported: dict[str, tuple[str, ...]]
    not_supported: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0                  # cases listed twice under one name (run once)
    no_cases: tuple[str, ...] = ()       # ops --list-ops names that the suite has no case of
    selection: int = 0                   # supported cases before sharding
    ops_source: str = "test-backend-ops support"

    @property
    def cases(self) -> int:
        return sum(len(c) for c in self.supported.values())

    def to_dict(self) -> dict[str, Any]:
        return {"ops": {op: len(c) for op, c in self.supported.items()}, "cases": self.cases,
                "not_supported": dict(self.not_supported), "duplicates": self.duplicates, "no_cases": list(self.no_cases),
                "selection": self.selection, "ops_source": self.ops_source}


def list_suite(binary: Path, *, log_dir: Path, backend: str = "CUDA0", ops: Sequence[str] = (),
               params: str | None = None, known_ops: Sequence[str] = (), shard: Shard | None = None,
               timeout: float = LIST_TIMEOUT_S) -> SuiteSpace:
    """The case space of ``ops`` (every op when empty) matching ``params``."""
    unknown = [op for op in ops if known_ops and op not in known_ops]
    if unknown:
        raise UsageError(f"--ops names {', '.join(unknown)}, which this test-backend-ops does not list "
                         f"(`test-backend-ops --list-ops`)")
    argv = [str(binary), "support", "-b", backend]
    if ops:
        argv += ["-o", ",".join(ops)]
    if params:
        argv += ["-p", params]
    result = run_command(argv, timeout=timeout, log_dir=log_dir, name="discover-list", tty=True)
    report = parse_backend_ops(result.stdout_text())
    if not report.cases and (not result.ok or result.timed_out):
        raise CaseListingFailed(f"`test-backend-ops support` could not list the suite ({result.describe()})")
    supported: dict[str, dict[str, None]] = {}
    refused: dict[str, int] = {}
    duplicates = 0
    for case in report.cases:
        if case.status == "NOT_SUPPORTED":
            refused[case.op] = refused.get(case.op, 0) + 1
        elif case.status == "SUPPORTED":
            listed = supported.setdefault(case.op, {})
            duplicates += case.params in listed
            listed[case.params] = None
    selection = sum(len(c) for c in supported.values())
    if shard is not None:
        supported = {op: {c: None for c in cases if case_shard(f"{op}({c})", shard.count) == shard.index}
                     for op, cases in supported.items()}
    listed = set(supported) | set(refused)
    no_cases = tuple(op for op in known_ops if op not in listed and (not ops or op in ops) and not params)
    return SuiteSpace(supported={op: tuple(c) for op, c in supported.items() if c}, not_supported=refused,
                      duplicates=duplicates, selection=selection, no_cases=no_cases,
                      ops_source="--list-ops checked, cases from test-backend-ops support" if known_ops
                      else "test-backend-ops support")
