"""What a build's ``test-backend-ops`` can do, asked through its ``--help`` and ``--list-ops``.

Forks and upstream differ in flags (``--seed``, ``--test-file``, ``-j``) and
modes; the engine plans its commands from this record instead of assuming one
version of the program.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvdiag.errors import UsageError
from kvdiag.parse.case_format import CaseFormat, kv_types_in
from kvdiag.proc.runner import run_command

PROBE_TIMEOUT_S = 30.0
PROBE_QUIET_S = 10.0         # a --help silent this long is hung (a real one prints within a second or two)


@dataclass(frozen=True)
class BackendOpsInfo:
    """What a ``test-backend-ops`` binary supports, read from its usage text."""

    path: Path
    help_text: str
    has_seed: bool
    has_test_file: bool
    has_parallel_jobs: bool
    modes: tuple[str, ...]
    ops: tuple[str, ...]  # from --list-ops when it has it; () otherwise
    has_list_ops: bool = False
    notes: tuple[str, ...] = ()
    kv_types: str | None = None   # how its cases name the K/V cache type (kvdiag.parse.case_format)

    @property
    def case_format(self) -> CaseFormat:
        """The case format its strings show (read from the program itself, so any tree, any era)."""
        return CaseFormat(self.kv_types, f"the field names in {self.path.name}'s strings" if self.kv_types
                          else f"neither type_KV= nor type_K=/type_V= in {self.path.name}'s strings")

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "has_seed": self.has_seed,
            "has_test_file": self.has_test_file,
            "has_parallel_jobs": self.has_parallel_jobs,
            "has_list_ops": self.has_list_ops,
            "modes": list(self.modes),
            "ops": list(self.ops),
            "notes": list(self.notes),
            "kv_types": self.kv_types,
            "help_text": self.help_text,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BackendOpsInfo":
        """The record :meth:`to_dict` wrote: the memo's cached form of a probe."""
        return cls(path=Path(data["path"]), help_text=str(data["help_text"]), has_seed=bool(data["has_seed"]),
                   has_test_file=bool(data["has_test_file"]), has_parallel_jobs=bool(data["has_parallel_jobs"]),
                   modes=tuple(str(m) for m in data["modes"]), ops=tuple(str(o) for o in data["ops"]),
                   has_list_ops=bool(data["has_list_ops"]), notes=tuple(str(n) for n in data["notes"]),
                   kv_types=data["kv_types"] if "kv_types" in data else program_kv_types(Path(data["path"])))


_OP_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_modes(help_text: str) -> tuple[str, ...]:
    """Mode names from the usage text: the ``valid modes:`` list, or the old one-line form."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if "valid modes are" in low:  # "valid modes are: test (...) or perf (...)"
            rest = re.sub(r"\([^()]*\)", " ", line.split(":", 1)[-1])
            return tuple(w for w in re.findall(r"[A-Za-z_]+", rest) if w.lower() not in ("or", "and"))
        if "valid modes" in low:
            modes = []
            for item in lines[i + 1:]:
                m = re.match(r"^\s*[-*]\s*([A-Za-z_][\w-]*)", item)
                if not m:
                    break
                modes.append(m.group(1))
            return tuple(modes)
    return ()


def parse_ops_list(text: str) -> tuple[str, ...]:
    """Op names printed by ``--list-ops``: lines of upper-case names; headers and totals skipped."""
    ops: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or ":" in line:
            continue
        tokens = [t for t in re.split(r"[\s,]+", line) if t]
        if tokens and all(_OP_NAME.match(t) for t in tokens):
            for t in tokens:
                if t not in ops:
                    ops.append(t)
    return tuple(ops)


def probe_help(binary: Path, *, log_dir: Path, name: str) -> str | None:
    """A binary's ``--help`` text (any exit code); None when it printed nothing or hung."""
    result = run_command([str(binary), "--help"], timeout=PROBE_TIMEOUT_S, log_dir=Path(log_dir), name=name,
                         quiet_timeout=PROBE_QUIET_S)
    text = result.combined_text()
    return text if text.strip() and not result.timed_out else None


def probe_backend_ops(binary: Path, *, log_dir: Path) -> BackendOpsInfo:
    """Run ``test-backend-ops --help`` (any exit code) and ``--list-ops`` when the help mentions it."""
    binary = Path(binary)
    if not binary.is_file():
        raise UsageError(f"test-backend-ops not found at {binary}")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    result = run_command([str(binary), "--help"], timeout=PROBE_TIMEOUT_S, log_dir=log_dir,
                         name="backend-ops-help", quiet_timeout=PROBE_QUIET_S)
    help_text = result.combined_text()
    if result.timed_out:
        notes.append(f"--help hung: stopped after {result.duration_s:.0f} s ({result.describe()})")
        print(f"kvdiag: {binary} --help hung; stopped after {result.duration_s:.0f} s", file=sys.stderr)
    if not help_text.strip():
        notes.append(f"--help printed nothing ({result.describe()})")

    has_list_ops = bool(re.search(r"--list-ops\b", help_text))
    ops: tuple[str, ...] = ()
    if has_list_ops:
        listing = run_command([str(binary), "--list-ops"], timeout=PROBE_TIMEOUT_S, log_dir=log_dir,
                              name="backend-ops-list-ops")
        if listing.returncode == 0 and not listing.timed_out:
            ops = parse_ops_list(listing.stdout_text())
            if not ops:
                notes.append("--list-ops printed no op names")
        else:
            notes.append(f"--list-ops failed: {listing.describe()}")

    return BackendOpsInfo(
        path=binary,
        help_text=help_text,
        has_seed=bool(re.search(r"--seed\b", help_text)),
        has_test_file=bool(re.search(r"--test-file\b", help_text)),
        has_parallel_jobs=bool(re.search(r"(?<![\w-])-j\b|--jobs\b", help_text)),
        modes=parse_modes(help_text),
        ops=ops,
        has_list_ops=has_list_ops,
        notes=tuple(notes),
        kv_types=program_kv_types(binary),
    )


def program_kv_types(binary: Path) -> str | None:
    """The K/V type field names compiled into the program (its ``vars()`` strings): which era's case
    format it prints, read without running it or reading its source. None when unreadable."""
    import mmap

    try:
        with open(binary, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return kv_types_in(data)
    except (OSError, ValueError):
        return None
