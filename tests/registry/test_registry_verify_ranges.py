"""`kvdiag registry verify` on a tree the entry's ranges place outside: before its code, or past the fix
that took the code away. D17's kernel was rewritten without `stateC` by its fix, so on every later tree
its function and sites are absent; that is what the range says, not a fact that moved."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kvdiag.cli import main

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RACY = """template <int splitH, int d_state>
__global__ void ssm_scan_f32_group(const float * src0) {
    __shared__ float stateC[splitH * d_state];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < splitH; j++) {
            stateC[j * d_state + threadIdx.x] = state[j] * C;
        }
        __syncthreads();
        for (int j = 0; j < splitH; j++) {
            float y = stateC[(threadIdx.x % WARP_SIZE) + d_state * (threadIdx.x / WARP_SIZE) + j * d_state * (d_state / WARP_SIZE)];
        }
    }
}
"""
REWRITTEN = """template <int c_factor, int d_state>
__global__ void ssm_scan_f32_group(const float * src0) {
    float state_sum = warp_reduce_sum(state_sum);
}
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def staged(tmp_path):
    """A ggml-like repository: one commit brings the racy kernel, the next rewrites it; a registry
    whose D17 names these two commits as its ggml range."""
    repo = tmp_path / "ggml"
    (repo / "src" / "ggml-cuda").mkdir(parents=True)
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "remote", "add", "origin", "https://github.com/ggml-org/ggml")
    (repo / "CMakeLists.txt").write_text('option(GGML_CUDA "ggml: use CUDA" OFF)\n')
    (repo / "tests").mkdir()
    (repo / "tests" / "CMakeLists.txt").write_text("add_executable(test-backend-ops test-backend-ops.cpp)\n")
    source = repo / "src" / "ggml-cuda" / "ssm-scan.cu"
    commits = []
    for text in (RACY, REWRITTEN):
        source.write_text(text)
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
        commits.append(git(repo, "rev-parse", "HEAD"))
    registry = tmp_path / "registry"
    registry.mkdir()
    entry = (REGISTRY / "D17.md").read_text()
    entry = entry.replace("d693430f05656bdf413ce6e13e8fbb4479191a8b", commits[0])
    entry = entry.replace("4c540d0b4e9d2f1f24e82c5bf05427fc1d6ecacb", commits[1])
    entry = entry.replace('related = ["D15"]\n', "")      # D15 is not in this registry
    (registry / "D17.md").write_text(entry)
    return repo, registry, commits


def test_past_the_fix_the_absent_code_is_what_the_range_says_not_a_mismatch(staged, capsys):
    repo, registry, _ = staged
    assert main(["--registry", str(registry), "registry", "verify", "--source", str(repo)]) == 0
    out, err = capsys.readouterr()
    assert out == "1 entries, 7 facts checked, 0 mismatch(es)\n"
    told = [line for line in err.splitlines() if "as the range says (fixed by range" in line]
    assert [line.split(":", 2)[1].strip() for line in told] == ["location.sites[0]", "location.sites[1]"]


def test_inside_the_range_the_same_facts_are_checked_and_found(staged, capsys):
    repo, registry, commits = staged
    git(repo, "checkout", "-q", commits[0])
    assert main(["--registry", str(registry), "registry", "verify", "--source", str(repo)]) == 0
    out, err = capsys.readouterr()
    assert "as the range says" not in err
    assert out == "1 entries, 7 facts checked, 0 mismatch(es)\n"


def test_without_the_range_the_absent_code_is_a_mismatch(staged, capsys):
    """The same tree, the entry's ggml range dropped: its llama.cpp range says nothing of a ggml tree."""
    repo, registry, commits = staged
    path = registry / "D17.md"
    text = path.read_text()
    start = text.index("[[affected]]\nrepo = \"https://github.com/ggml-org/ggml\"")
    path.write_text(text[:start] + text[text.index("[[affected]]", start + 1):])
    assert main(["--registry", str(registry), "registry", "verify", "--source", str(repo)]) == 65
    out = capsys.readouterr().out
    assert "D17.md: location.sites[0]" in out and "D17.md: location.sites[1]" in out
