"""A synthetic git project for verify and bisect tests (CPU only, no GPU, no sanitizer).

The project (tests/scenarios/git/project) "compiles" kernel.txt into a fake
bin/test-backend-ops: a line "divergent" makes it print a barrier error for the
hsk=256 cases (the synthetic entry's signature), "wrong" makes every case FAIL,
"syntax error" makes build.py exit 1. Its configure/build commands are passed
the way a user passes theirs: --configure-cmd / --build-cmd.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from isolation import isolate_git

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "tests" / "scenarios" / "git" / "project"
SERVERS = REPO / "tests" / "scenarios" / "servers"
PY = shlex.quote(sys.executable)
CONFIGURE = f"{PY} {{source}}/configure.py {{build}}"
BUILD = f"{PY} {{source}}/build.py {{build}}"

ENTRY = """\
```toml
[defect]
id = "D90"
title = "Synthetic divergent barrier"
summary = "The synthetic project's kernel reaches a barrier divergently for hsk=256 cases."
owner = "upstream"
status = "open"
severity = "low"
reported = "2026-01-01"
modified = "2026-01-02"

[location]
component = "synthetic/kernel"
files = ["kernel.txt"]

[requires]
binaries = ["test-backend-ops"]
gpu = false
sanitizer = false

[[repro]]
name = "fast"
kind = "backend-ops"
default = true
description = "One hsk=256 case; the fake program prints the barrier error."
argv = ["{{ bin['test-backend-ops'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", "-p", "{{ params }}"]
timeout = 30
vars = { op = "FLASH_ATTN_EXT", params = 'hsk=256,hsv=256,nh=4,kv=512' }

[[repro]]
name = "numeric"
kind = "backend-ops"
description = "The same case, read for OK/FAIL only."
argv = ["{{ bin['test-backend-ops'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", "-p", "{{ params }}"]
timeout = 30
vars = { op = "FLASH_ATTN_EXT", params = 'hsk=256,hsv=256,nh=4,kv=512' }

[[signature]]
type = "output"
step = "fast"
pattern = "Barrier error detected"
```

# D90 — synthetic
"""

# A fix probe of D90 (format name, new: the barrier line it writes, summary).
PROBE = """\
kvdiag-probe: {name}
defect: D90
kind: fix
repository: https://example.invalid/synthetic
commit: 0123456789abcdef0123456789abcdef01234567
path-prefix: kernel.txt
output-correct: expected yes
requires: none
summary: {summary}
---
diff --git a/kernel.txt b/kernel.txt
--- a/kernel.txt
+++ b/kernel.txt
@@ -1,3 +1,3 @@
 kernel v1
-barrier: divergent
+barrier: {new}
 end
"""

def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def commit(repo: Path, message: str, kernel: str | None = None, **files: str) -> str:
    if kernel is not None:
        (repo / "kernel.txt").write_text(f"kernel v1\nbarrier: {kernel}\nend\n")
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_project(root: Path, kernel: str, *, server: bool = False) -> Path:
    """The project at ``root``; with ``server`` its build also makes a stand-in llama-server (D3's shape)."""
    root.mkdir(parents=True)
    git(root, "-c", "init.defaultBranch=main", "init", "-q")
    for item in PROJECT.iterdir():
        if item.suffix == ".py":
            shutil.copy(item, root / item.name)
    extra = {"standin_dir.txt": f"{SERVERS}\n"} if server else {}
    commit(root, "project", kernel=kernel, README="synthetic\n", **extra)
    return root


def run_cli(args: list[str]) -> int:
    from kvdiag.cli import main

    return main(args)


def worktrees(repo: Path) -> list[str]:
    return [ln.split(" ", 1)[1] for ln in git(repo, "worktree", "list", "--porcelain").splitlines()
            if ln.startswith("worktree ")]


def scratch_dirs() -> list[str]:
    """What kvdiag left in the temporary folder (the env fixture gives each test its own)."""
    return sorted(p.name for p in Path(tempfile.gettempdir()).iterdir())


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Isolated git and kvdiag home; the registry holding the synthetic entry D90."""
    isolate_git(monkeypatch, tmp_path / "home-dir")
    monkeypatch.setenv("KVDIAG_HOME", str(tmp_path / "kvdiag-home"))
    monkeypatch.delenv("LLAMA_KV_BUILD", raising=False)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "D90.md").write_text(ENTRY)
    return registry


