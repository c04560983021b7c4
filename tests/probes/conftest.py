"""Fixtures for the kvdiag.probes tests: isolated git, a small source repository, tiny probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from isolation import isolate_git
from probes_helpers import kernel_lines, make_repo, text_diff, write_probe


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git isolated from the user's configuration, with an identity; kvdiag's home in tmp_path."""
    isolate_git(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("KVDIAG_HOME", str(tmp_path / "kvdiag-home"))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


@pytest.fixture
def source(tmp_path: Path, git_env) -> Path:
    """A ggml-shaped repository: src/kernel.cu (12 lines) and README, one commit, plus an untracked file."""
    repo = make_repo(tmp_path / "user-src", {"src/kernel.cu": kernel_lines(), "README": "demo\n"})
    (repo / "notes.txt").write_text("the user's own untracked work\n")
    return repo


@pytest.fixture
def probes_dir(tmp_path: Path) -> Path:
    """Tiny probes for ``source``: base, needs-base (requires base), clash (edits base's line), other, new-file."""
    folder = tmp_path / "probes"
    pristine = kernel_lines()

    def edited(text: str, index: int, line: str) -> str:
        lines = text.splitlines(keepends=True)
        lines[index] = line
        return "".join(lines)

    with_base = edited(pristine, 2, "line 3 (base)\n")
    write_probe(folder, "base", text_diff("src/kernel.cu", pristine, with_base))
    write_probe(folder, "needs-base", text_diff("src/kernel.cu", with_base, edited(with_base, 2, "line 3 (more)\n")),
                requires="base", kind="instrument")
    write_probe(folder, "clash", text_diff("src/kernel.cu", pristine, edited(pristine, 2, "line 3 (clash)\n")))
    write_probe(folder, "other", text_diff("src/kernel.cu", pristine, edited(pristine, 10, "line 11 (other)\n")))
    write_probe(folder, "new-file", text_diff("src/added.cu", "", "// added\n"), kind="instrument")
    return folder
