"""`kvdiag registry verify` and run-time applicability ask a tree the same questions.

The regression at the centre: D10 once named `tests/test-upstream-merge-keepers-static.cpp`,
a path inferred from the test's name; on BeeLlama 775450a68 the test is a Python
script registered with CTest under that name, and kvdiag said not-applicable. The
stand-in tree here is built from our recorded listing of that commit's tests/ folder
and CTest names (names only, no fetched source).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kvdiag.cli import main
from kvdiag.engine.verdict.applicability import Facts, judge_applicability
from kvdiag.exitcodes import ExitCode
from kvdiag.registry.loader import load_registry
from kvdiag.registry.verify import verify_entries
from kvdiag.workspace.sites import SiteSpec
from kvdiag.workspace.tree import Tree
from tree_stand_in import listing, stand_in

LISTING = listing("fork-775450a68-tests.json")
OLD_D10_FACTS = ('files = ["tests/test-upstream-merge-keepers-static.cpp"]\n\n[applies]\n'
                 'source_paths = ["tests/test-upstream-merge-keepers-static.cpp"]\n')


def _fork_stand_in(root: Path) -> tuple[Path, Path]:
    """A source folder with the recorded tests/ names (empty files) and a build whose CTest lists the tests."""
    return stand_in(LISTING, root, cache={"GGML_CUDA": "ON"})


def _registry_with_old_d10(root: Path, project_dir: Path) -> Path:
    registry = root / "registry"
    shutil.copytree(project_dir / "registry", registry)
    text = (registry / "D10.md").read_text()
    files, applies = OLD_D10_FACTS.split("\n\n[applies]\n")
    text = text.replace('files = ["tests/test-upstream-merge-keepers-static.py"]', files, 1)
    text = text.replace('tests = ["test-upstream-merge-keepers-static"]\n', applies, 1)
    (registry / "D10.md").write_text(text)
    return registry


def _facts(build: Path) -> Facts:
    from kvdiag.workspace.build import inspect_build

    info = inspect_build(build, log_dir=build / "logs", check_staleness=False)
    return Facts(build=info, compute_capability=None, gpu_available=False, sanitizer=None,
                 backend_ops_ops=None, backend_ops_help=None)


def test_the_old_d10_fact_is_a_mismatch_that_names_the_python_test(tmp_path, project_dir):
    source, build = _fork_stand_in(tmp_path)
    registry = load_registry(_registry_with_old_d10(tmp_path, project_dir))
    (report,) = verify_entries([registry.get("D10")], Tree.open(source, build))
    assert report.other_tree is None
    keys = [m.key for m in report.mismatches]
    assert keys == ["applies.source_paths[0]", "location.files[0]"]
    message = report.mismatches[0].message
    assert "tests/test-upstream-merge-keepers-static.py" in message
    assert "CTest test test-upstream-merge-keepers-static (python3 test-upstream-merge-keepers-static.py)" in message


def test_the_old_d10_fact_makes_the_run_inconclusive_not_not_applicable(tmp_path, project_dir):
    _, build = _fork_stand_in(tmp_path)
    entry = load_registry(_registry_with_old_d10(tmp_path, project_dir)).get("D10")
    judgement = judge_applicability(entry, entry.default_step, _facts(build))
    assert judgement.verdict == "inconclusive"
    assert "tests/test-upstream-merge-keepers-static.py" in judgement.reason and "out of date" in judgement.reason


def test_the_fixed_d10_finds_the_test_by_its_ctest_name_and_goes_ahead(tmp_path):
    source, build = _fork_stand_in(tmp_path)
    entry = load_registry(None).get("D10")
    (report,) = verify_entries([entry], Tree.open(source, build))
    assert report.mismatches == [] and report.checked == 3
    assert judge_applicability(entry, entry.default_step, _facts(build)).verdict is None


def test_the_test_is_found_by_its_source_when_the_build_has_no_ctest_files(tmp_path):
    source, build = _fork_stand_in(tmp_path)
    for f in build.rglob("CTestTestfile.cmake"):
        f.unlink()
    answer = Tree.open(source, build).test("test-upstream-merge-keepers-static")
    assert answer.found and "tests/test-upstream-merge-keepers-static.py" in answer.detail


def test_a_tree_without_the_test_is_not_applicable_naming_both_places_looked(tmp_path):
    source, build = _fork_stand_in(tmp_path)
    (source / "tests" / "test-upstream-merge-keepers-static.py").unlink()
    text = (build / "tests" / "CTestTestfile.cmake").read_text().splitlines()
    (build / "tests" / "CTestTestfile.cmake").write_text(
        "\n".join(line for line in text if "merge-keepers" not in line) + "\n")
    entry = load_registry(None).get("D10")
    judgement = judge_applicability(entry, entry.default_step, _facts(build))
    assert judgement.verdict == "not-applicable"
    assert "CTest registers no test test-upstream-merge-keepers-static" in judgement.reason
    assert "no tests/test-upstream-merge-keepers-static.*" in judgement.reason
    (report,) = verify_entries([entry], Tree.open(source, build))
    assert report.other_tree and not report.mismatches


def test_unknown_tree_is_a_note_never_not_applicable(tmp_path):
    (tmp_path / "CMakeCache.txt").write_text("GGML_CUDA:BOOL=ON\n")
    entry = load_registry(None).get("D10")
    judgement = judge_applicability(entry, entry.default_step, _facts(tmp_path))
    assert judgement.verdict is None
    assert any("could not check for test test-upstream-merge-keepers-static" in n for n in judgement.notes)


def test_a_site_is_placed_by_its_context_in_either_layout_and_a_common_text_alone_is_ambiguous(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cuh").write_text("a\n__syncthreads();\nif (x) {\n  b();\n  __syncthreads();\n}\n")
    tree = Tree.open(tmp_path)
    anchored = tree.place(SiteSpec("ggml/src/k.cuh", "__syncthreads();", "if (x) {", at={"abc": 2}))
    assert (anchored.state, anchored.at, anchored.recorded) == ("found", "src/k.cuh:5", None)
    bare = tree.place(SiteSpec("src/k.cuh", "__syncthreads();"))
    assert bare.state == "ambiguous" and bare.line is None
    assert bare.detail == ("ambiguous: 2 candidates, line 2 (after line 1: `a`); "
                           "line 5 (after line 4: `b();`)")


def test_an_option_is_found_in_the_cmake_files_without_a_cache(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text('option(GGML_CUDA_KVARN "kvarn" OFF)\n')
    tree = Tree.open(tmp_path)
    assert tree.option("GGML_CUDA_KVARN").found
    assert tree.option("GGML_NOPE").state == "absent"


def test_cli_exits_65_on_mismatch_and_0_on_a_clean_tree(tmp_path, project_dir, capsys):
    source, build = _fork_stand_in(tmp_path)
    registry = _registry_with_old_d10(tmp_path, project_dir)
    argv = ["registry", "verify", "--source", str(source), "--build", str(build), "D10"]
    assert main(["--registry", str(registry), *argv]) == ExitCode.DATA
    out = capsys.readouterr().out
    assert out.startswith("D10.md: applies.source_paths[0]: no tests/test-upstream-merge-keepers-static.cpp")
    assert main(argv) == 0
    assert main(["registry", "verify", "--source", str(tmp_path / "nope")]) == ExitCode.USAGE

