"""Fixtures for the kvdiag.probes tests: isolated git, a small source repository, tiny probes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from probes_helpers import kernel_lines, make_repo, text_diff, write_probe


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git isolated from the user's configuration, with an identity; kvdiag's home in tmp_path."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("KVDIAG_HOME", str(tmp_path / "kvdiag-home"))
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.invalid")


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
