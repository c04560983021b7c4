"""`registry lint` checks the rules the OSV export relies on: aliases are advisory ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvdiag.cli import main
from kvdiag.registry.osv import alias_problem

REGISTRY = Path(__file__).resolve().parents[2] / "registry"


@pytest.mark.parametrize("alias", ["CVE-2025-12345", "GHSA-abcd-efgh-ijkl", "PYSEC-2024-7", "SUSE-SU-2024:0001-1"])
def test_advisory_ids_are_aliases(alias):
    assert alias_problem(alias) is None


@pytest.mark.parametrize("alias", ["ggml-org/llama.cpp#27678", "https://github.com/x/y/issues/1", "KVDIAG-D3", "27678"])
def test_links_and_own_ids_are_not(alias):
    assert alias_problem(alias)


def test_lint_flags_an_issue_link_given_as_an_alias(tmp_path, capsys):
    registry = tmp_path / "registry"
    shutil.copytree(REGISTRY, registry)
    d2 = registry / "D2.md"
    text = d2.read_text()
    d2.write_text(text.replace('\nrelated = ', '\naliases = ["ggml-org/llama.cpp#27678"]\nrelated = ', 1))
    assert 'aliases = ["ggml-org' in d2.read_text()
    assert main(["--registry", str(registry), "registry", "lint"]) == 65
    out = capsys.readouterr().out
    assert "D2.md: defect.aliases[0]: 'ggml-org/llama.cpp#27678' is not an advisory id" in out
