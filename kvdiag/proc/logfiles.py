"""Reading a process's three logs back (stdout, stderr, both interleaved).

Results keep paths, not text: output can be megabytes and is already on disk,
streamed there while the process ran.
"""

from __future__ import annotations

from pathlib import Path


def log_paths(log_dir: Path, name: str) -> dict[str, Path]:
    """The three log files of a command named `name`; the engine's observe() reads them back."""
    return {
        "stdout": log_dir / f"{name}.stdout.log",
        "stderr": log_dir / f"{name}.stderr.log",
        "combined": log_dir / f"{name}.combined.log",
    }


class LogTexts:
    """Mixin for results that have stdout_path, stderr_path and combined_path (and, from a
    full disk, ``log_lost``: (log file name, bytes of output that never reached it) pairs)."""

    stdout_path: Path
    stderr_path: Path
    combined_path: Path
    log_lost: tuple[tuple[str, int], ...] = ()
    log_error: str | None = None

    @property
    def log_cut(self) -> int:
        """Bytes of output missing from the most-cut of the logs; 0 when every log is whole."""
        return max((n for _, n in self.log_lost), default=0)

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stdout_text(self) -> str:
        return self._read(self.stdout_path)

    def stderr_text(self) -> str:
        return self._read(self.stderr_path)

    def combined_text(self) -> str:
        return self._read(self.combined_path)
