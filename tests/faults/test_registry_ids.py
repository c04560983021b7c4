"""Issue 28: a registry that names one id twice, or names nothing, is never read as a guess.

Two files claiming one id used to fail only `registry lint`: `show`, `run` and
`list` silently took the file that passes on its own. The loader now refuses the
registry (exit 65, one line naming both files); lint still lists every problem.
An empty registry used to lint clean (exit 0) and list an empty table.
"""

from __future__ import annotations

import pytest

from faults_helpers import Faults, one_line


def _registry_claiming_d12_twice(kv: Faults):
    reg = kv.registry_copy("D12")
    (reg / "D13.md").write_text((reg / "D12.md").read_text())      # a copy whose id was never changed
    return reg


@pytest.mark.parametrize("args", [["show", "D12"], ["list"], ["run", "D12", "--build", "BUILD", "--no-staleness"],
                                  ["sweep", "--build", "BUILD", "--only", "D12"]],
                         ids=["show", "list", "run", "sweep"])
def test_two_files_with_one_id_are_refused_by_every_command_naming_both(kv: Faults, args):
    reg = _registry_claiming_d12_twice(kv)
    build = kv.build("throws_healthily.sh")
    code, out, err = kv.cli("--registry", reg, *[build if a == "BUILD" else a for a in args])
    assert code == 65 and out == "", (code, out, err)
    assert one_line(err) == (f"kvdiag: the registry {reg} has 2 entries with id 'D12': D12.md and D13.md "
                             f"(`kvdiag registry lint` lists every problem)")
    assert kv.runs() == []


def test_lint_lists_the_duplicate_among_every_problem(kv: Faults):
    reg = _registry_claiming_d12_twice(kv)
    code, out, _ = kv.cli("--registry", reg, "registry", "lint")
    assert code == 65
    assert "D13.md: defect.id: duplicate id 'D12' (also D12.md)" in out.splitlines()


@pytest.mark.parametrize("args", [["registry", "lint"], ["list"], ["registry", "export", "--output", "OSV"]],
                         ids=["lint", "list", "export"])
def test_an_empty_registry_fails_lint_and_list(kv: Faults, args):
    reg = kv.root / "empty-registry"
    reg.mkdir()
    code, out, err = kv.cli("--registry", reg, *[str(kv.root / "osv") if a == "OSV" else a for a in args])
    assert code == 65 and out == "", (code, out, err)
    assert one_line(err) == f"kvdiag: the registry {reg} has no usable entries (no D*.md files)"
    assert not (kv.root / "osv").exists()
