"""CTest's own test list, read from recorded CTestTestfile.cmake files (our CPU configure of BeeLlama)."""

from __future__ import annotations

import gzip
from pathlib import Path

from kvdiag.workspace.ctest import read_ctest

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "cpu-fork-775450a68"


def _build_with(tmp_path: Path, tests_file: str) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "CTestTestfile.cmake").write_text('# generated\nsubdirs("ggml")\nsubdirs("tests")\n')
    (tmp_path / "tests" / "CTestTestfile.cmake").write_text(tests_file)
    return tmp_path


def test_a_python_test_registered_with_ctest_is_found_by_name_through_subdirs(tmp_path):
    build = _build_with(tmp_path, gzip.decompress((RECORDED / "tests.CTestTestfile.cmake.gz").read_bytes()).decode())
    listing = read_ctest(build)
    assert listing.readable and len(listing.files) == 2
    test = listing.get("test-upstream-merge-keepers-static")
    assert Path(test.command[0]).name == "python3"
    assert test.script().endswith("tests/test-upstream-merge-keepers-static.py")
    assert test.labels == ("main",) and test.working_directory.endswith("forkfacts-src")
    assert listing.get("test-backend-ops") is not None
    assert len(listing.tests) == 95


def test_bracket_and_quoted_arguments_and_property_lists(tmp_path):
    build = _build_with(tmp_path, (
        'add_test([=[a b]=] "/bin/x" "--name=\\"q\\"" [==[y]=]z]==])\n'
        'set_tests_properties([=[a b]=] PROPERTIES  LABELS "one;two" WORKING_DIRECTORY "/w")\n'
        "add_test(plain /bin/true)\n"))
    listing = read_ctest(build)
    assert listing.get("a b").command == ("/bin/x", '--name="q"', "y]=]z")
    assert listing.get("a b").labels == ("one", "two") and listing.get("plain").command == ("/bin/true",)


def test_a_folder_without_ctest_files_says_why(tmp_path):
    listing = read_ctest(tmp_path)
    assert not listing.readable and "CTestTestfile.cmake" in listing.problem and not listing.tests
