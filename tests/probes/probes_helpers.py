"""Helpers shared by the kvdiag.probes tests (a uniquely named module, imported by name)."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tests" / "scenarios" / "git"

HEADER = """\
kvdiag-probe: {name}
defect: {defect}
kind: {kind}
repository: https://github.com/example/demo
commit: 0123456789abcdef0123456789abcdef01234567
path-prefix: {prefix} (free text after the prefix)
output-correct: {correct}
requires: {requires}
summary: {summary}
---
"""


def git(repo: Path, *args: str) -> str:
    """A git command in a test's own repository (set-up only; kvdiag's own calls go through its runner)."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(root: Path, files: dict[str, str], message: str = "first") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "-c", "init.defaultBranch=main", "init", "-q")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    commit_all(root, message)
    return root


def diff_of(repo: Path, edits: dict[str, str]) -> str:
    """The `git diff` that turns the committed files into ``edits``, then undo the edits."""
    for rel, text in edits.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "--", *edits)
    diff = subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--", *edits], capture_output=True,
                          text=True, check=True).stdout
    git(repo, "reset", "-q", "--hard")   # also deletes the files the edits added (they were staged)
    return diff


def text_diff(rel: str, old: str, new: str) -> str:
    """A git-style diff of one file from ``old`` to ``new`` ('' old: a new file), without running git."""
    if not old:
        added = new.splitlines(keepends=True)
        return (f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n+++ b/{rel}\n"
                f"@@ -0,0 +1,{len(added)} @@\n" + "".join("+" + line for line in added))
    body = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                fromfile=f"a/{rel}", tofile=f"b/{rel}")
    return f"diff --git a/{rel} b/{rel}\n" + "".join(body)


def write_probe(folder: Path, name: str, diff: str, *, defect: str = "D90", kind: str = "fix",
                prefix: str = "src", requires: str = "none", correct: str = "yes",
                summary: str = "A test probe.\n  Its summary goes on here.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.patch"
    path.write_text(HEADER.format(name=name, defect=defect, kind=kind, prefix=prefix, requires=requires,
                                  correct=correct, summary=summary) + diff)
    return path


def kernel_lines(n: int = 12) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def run_cli(args: list[str]) -> int:
    """`kvdiag ARGS` through kvdiag.cli.main, with this issue's commands registered (idempotent)."""
    from kvdiag.cli import cli, main
    from kvdiag.commands.probes import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)
    return main(args)
