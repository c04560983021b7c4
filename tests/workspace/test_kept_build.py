"""The kept scratch build's readers, against what cmake 3.25 and ninja 1.11 printed here, and
its pruning of old folders."""

from __future__ import annotations

import json
import os

from kvdiag.workspace.kept_build import STAMP, KeptBuildKey, option_definition, parse_query, prune, unused_variables

# cmake -S src -B b -G Ninja -DGGML_CUDA_KVARN=ON -DGGML_CUDA=ON on a project that reads neither (stderr)
UNUSED = """CMake Warning:
  Manually-specified variables were not used by the project:

    GGML_CUDA
    GGML_CUDA_KVARN


"""
# ninja -C b -t query /src/x.c /src/nope.c (stdout; stderr: ninja: error: unknown target '/src/nope.c', exit 1)
QUERY = """/src/x.c:
  outputs:
    CMakeFiles/x.dir/x.c.o
"""
# the fork's KVarN instance in its configured tree (775450a68)
FORK_QUERY = """/src/ggml/src/ggml-cuda/template-instances/fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu:
  outputs:
    ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/template-instances/fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu.o
"""


def test_cmakes_unused_variables_are_read():
    assert unused_variables(UNUSED) == ["GGML_CUDA", "GGML_CUDA_KVARN"]
    assert unused_variables("-- Configuring done\n-- Generating done\n") == []


def test_ninjas_query_gives_each_sources_object():
    assert parse_query(QUERY) == {"/src/x.c": ["CMakeFiles/x.dir/x.c.o"]}
    (outputs,) = parse_query(FORK_QUERY).values()
    assert outputs == ["ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/template-instances/"
                       "fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu.o"]


def test_an_option_is_found_where_the_trees_cmake_defines_it(tmp_path):
    (tmp_path / "ggml").mkdir()
    (tmp_path / "CMakeLists.txt").write_text("add_subdirectory(ggml)\n")
    (tmp_path / "ggml" / "CMakeLists.txt").write_text(
        'option(GGML_CUDA "ggml: use CUDA" OFF)\n'
        'option(GGML_CUDA_KVARN                      "ggml: compile CUDA/HIP KVarN kernels"     OFF)\n')
    (tmp_path / "build").mkdir()            # a build folder inside the tree is not searched
    (tmp_path / "build" / "CMakeCache.txt").write_text("GGML_CUDA_NEW:BOOL=ON\n")
    (tmp_path / "build" / "x.cmake").write_text("option(GGML_CUDA_NEW \"\" ON)\n")
    assert option_definition(tmp_path, "GGML_CUDA_KVARN") == "ggml/CMakeLists.txt:2"
    assert option_definition(tmp_path, "GGML_CUDA_NEW") is None
    assert option_definition(tmp_path, "GGML_CUDA_KVAR") is None


def test_the_key_changes_with_the_options_and_names_the_commit(tmp_path):
    key = KeptBuildKey.make(tmp_path, "775450a68" + "0" * 31, {"GGML_CUDA_KVARN": "ON"}, None)
    same = KeptBuildKey.make(tmp_path, "775450a68" + "0" * 31, {"GGML_CUDA_KVARN": "ON"}, None)
    other = KeptBuildKey.make(tmp_path, "775450a68" + "0" * 31, {"GGML_CUDA_KVARN": "OFF"}, None)
    assert key.folder_name() == same.folder_name() != other.folder_name()
    assert key.folder_name().startswith("775450a68000-")


def test_old_scratch_builds_are_pruned_and_the_current_one_kept(tmp_path):
    for n in range(6):
        folder = tmp_path / f"f{n}"
        folder.mkdir()
        (folder / STAMP).write_text(json.dumps({"key": {}}))
        os.utime(folder / STAMP, (1000 + n, 1000 + n))
    removed = prune(tmp_path, keep=4, current="f0")
    assert sorted(removed) == ["f1", "f2"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["f0", "f3", "f4", "f5"]
