"""An entry's condition tables, typed: ``[applies]``, ``[requires]``, ``[scan]`` and ``[drift]``.

The linter (`kvdiag.registry.lint`) reads the raw TOML so that it can report every
problem; the loader builds these only from tables that passed it, so the engine reads
attributes with their defaults here instead of looking keys up. Each keeps ``table``,
the keys as the entry wrote them, for `kvdiag show` (``items()``), and is false when
the entry wrote none.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ItemsView, Mapping, TypeVar

__all__ = ["Applies", "DriftSpec", "Requires", "ScanSpec", "from_table"]

_Section = TypeVar("_Section")


@dataclass(frozen=True)
class _Table:
    table: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.table)

    def items(self) -> ItemsView[str, Any]:
        return self.table.items()


def from_table(cls: type[_Section], table: Mapping[str, Any] | None) -> _Section:
    """The typed section of a linted table (lists become tuples; keys the type does not name stay in ``table``)."""
    table = dict(table or {})
    known = {f.name for f in fields(cls)} - {"table"}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k in known}
    return cls(table=table, **values)


@dataclass(frozen=True)
class Applies(_Table):
    """When the build cannot have the defect: any condition false gives not-applicable."""

    cc_min: str | None = None
    cc_max: str | None = None
    cmake_options: tuple[str, ...] = ()
    cmake_values: Mapping[str, str] = field(default_factory=dict)
    source_paths: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    backend_ops_flags: tuple[str, ...] = ()
    server_flags: tuple[str, ...] = ()
    source_facts: tuple[Mapping[str, Any], ...] = ()   # {files, pattern, says}: see schema.APPLIES


@dataclass(frozen=True)
class Requires(_Table):
    """What must be present to run: anything missing gives skipped."""

    binaries: tuple[str, ...] = ()
    sanitizer: bool = False
    gpu: bool = False
    env: tuple[str, ...] = ()
    lineinfo: bool = False
    model_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScanSpec(_Table):
    """The case space `kvdiag scan` walks (``step``, ``op``, ``params`` are required by the linter)."""

    step: str = ""
    op: str = ""
    params: str = ""
    print_limit: int | None = None                   # None: the step's own
    sanitizer_options: tuple[str, ...] | None = None  # None: the step's own
    dimensions: tuple[str, ...] = ()                 # the case parameters that select an instantiation


@dataclass(frozen=True)
class DriftSpec(_Table):
    """The numeric drift criterion of `kvdiag drift` (``op``, ``params``, ``runs`` are required by the linter)."""

    op: str = ""
    params: str = ""
    runs: int = 5
    seeds: tuple[str, ...] = ()
    confirm_min_fails: int = 1
    confirm_min_err: float = 0.0
