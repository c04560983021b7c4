"""kvdiag.workspace.build: the CMake cache, binaries, git state, staleness (with real ninja/make/git)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from target_helpers import run, write_exe
from kvdiag.errors import UsageError
from kvdiag.workspace import build as B
from kvdiag.workspace.staleness import check as staleness_mod
from kvdiag.workspace.build import (
    BuildInfo,
    cmake_bool,
    find_binaries,
    git_state,
    inspect_build,
    lineinfo_in_flags,
    parse_cmake_cache,
)

needs_ninja = pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not installed")
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def set_mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t))


# --------------------------------------------------------------------------- the cache


def test_parse_cmake_cache_lines_comments_and_quirks():
    text = (
        "# comment\r\n"
        "// help text\r\n"
        "\r\n"
        "CMAKE_BUILD_TYPE:STRING=Release\r\n"
        '"KEY WITH:COLON":STRING=quoted key\n'
        "UNTYPED=plain\n"
        "CMAKE_CUDA_FLAGS:STRING=-DA=1 -lineinfo\n"
        "TRAILING:STRING='  spaced  '\n"
        "EMPTY:STRING=\n"
        "garbage line without equals\n"
    )
    cache = parse_cmake_cache(text)
    assert cache["CMAKE_BUILD_TYPE"] == "Release"
    assert cache["KEY WITH:COLON"] == "quoted key"
    assert cache["UNTYPED"] == "plain"
    assert cache["CMAKE_CUDA_FLAGS"] == "-DA=1 -lineinfo"
    assert cache["TRAILING"] == "  spaced  "
    assert cache["EMPTY"] == ""
    assert len(cache) == 6


@pytest.mark.parametrize(
    "value,expected",
    [("ON", True), ("on", True), ("1", True), ("YES", True), ("TRUE", True), ("Y", True), ("2", True),
     ("OFF", False), ("0", False), ("NO", False), ("FALSE", False), ("N", False), ("", False),
     ("IGNORE", False), ("NOTFOUND", False), ("CUDA-NOTFOUND", False), ("banana", False), (None, False)],
)
def test_cmake_bool(value, expected):
    assert cmake_bool(value) is expected


@pytest.mark.parametrize(
    "flags,expected",
    [("-O3 -lineinfo", "-lineinfo"), ("--generate-line-info", "--generate-line-info"), ("-G", "-G"),
     ('"-lineinfo" -O2', "-lineinfo"), ("-O3 --use_fast_math", None), ("-Xptxas=-lineinfoX", None),
     ("", None), (None, None), ('-DX="unbalanced', None)],
)
def test_lineinfo_in_flags(flags, expected):
    assert lineinfo_in_flags(flags) == expected


# --------------------------------------------------------------------------- fixtures


def test_no_lineinfo_cuda_build(fixture_build, log_dir):
    info = inspect_build(fixture_build("no-lineinfo"), log_dir=log_dir)
    assert info.generator == "Ninja"
    assert info.cuda is True
    assert info.cuda_architectures == "90"
    assert info.cuda_flags == "-O3 --use_fast_math"
    assert info.lineinfo is False and info.lineinfo_source is None
    assert info.build_type == "Release"
    assert info.cuda_compiler_version == "13.0.88"
    assert info.source_dir == Path("/home/dev/llama.cpp")
    assert info.options["GGML_CUDA_FA_ALL_QUANTS"] == "ON"
    assert info.options["LLAMA_BUILD_TESTS"] == "ON"
    assert "GGML_CUDA_GRAPHS-ADVANCED" not in info.options
    assert not any(k.startswith("CMAKE_") for k in info.options)
    assert dict(info.binaries) == {}
    assert info.git is None
    assert any("does not exist here" in n for n in info.notes)
    assert any("no executables" in n for n in info.notes)
    # a Ninja cache without build.ninja: currency unknown, said why
    assert info.staleness.checked is False and info.staleness.stale is None
    assert "no build.ninja" in info.staleness.detail


def test_lineinfo_build_and_its_binary(fixture_build, log_dir):
    root = fixture_build("lineinfo")
    info = inspect_build(root, log_dir=log_dir, check_staleness=False)
    assert info.lineinfo is True
    assert info.lineinfo_source == "CMAKE_CUDA_FLAGS: -lineinfo"
    assert info.build_type == "RelWithDebInfo"
    assert info.has_binary("test-backend-ops")
    assert info.binary("test-backend-ops") == root.resolve() / "bin" / "test-backend-ops"
    assert info.binary("llama-server") is None and not info.has_binary("llama-server")
    assert info.staleness.checked is False and info.staleness.detail == "the dry run was turned off for this command"


def test_ggml_cuda_debug_means_lineinfo(fixture_build, log_dir):
    info = inspect_build(fixture_build("cuda-debug"), log_dir=log_dir, check_staleness=False)
    assert info.lineinfo is True
    assert "GGML_CUDA_DEBUG" in info.lineinfo_source


def test_lineinfo_from_build_type_flags(tmp_path, log_dir):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "CMakeCache.txt").write_text(
        "CMAKE_BUILD_TYPE:STRING=Debug\nCMAKE_CUDA_FLAGS_DEBUG:STRING=-G -O0\nGGML_CUDA:BOOL=ON\n"
    )
    info = inspect_build(tmp_path / "b", log_dir=log_dir, check_staleness=False)
    assert info.lineinfo is True and info.lineinfo_source == "CMAKE_CUDA_FLAGS_DEBUG: -G"
    assert info.generator is None and info.cuda_flags is None


def test_native_cuda_build_without_cached_architectures(tmp_path, log_dir):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "CMakeCache.txt").write_text("GGML_CUDA:BOOL=ON\nGGML_NATIVE:BOOL=ON\n")
    info = inspect_build(tmp_path / "b", log_dir=log_dir, check_staleness=False)
    assert info.cuda_architectures is None
    assert any("'native'" in n for n in info.notes)


def test_cpu_only_build_finds_programs_only(fixture_build, log_dir):
    info = inspect_build(fixture_build("cpu-only"), log_dir=log_dir, check_staleness=False)
    assert info.cuda is False
    assert info.generator == "Unix Makefiles"
    assert sorted(info.binaries) == ["llama-cli"]  # not libggml-base.so, not notes.txt
    assert info.options == {"GGML_CUDA": "OFF", "GGML_NATIVE": "ON", "LLAMA_CURL": "OFF"}


def test_legacy_cublas_option_means_cuda(fixture_build, log_dir):
    info = inspect_build(fixture_build("legacy-cublas"), log_dir=log_dir, check_staleness=False)
    assert info.cuda is True
    assert info.options["LLAMA_CUBLAS"] == "ON"


def test_release_tarball_without_cache(fixture_build, log_dir):
    root = fixture_build("release-tarball")
    info = inspect_build(root, log_dir=log_dir)
    assert info.cache_path is None and info.generator is None and info.source_dir is None
    assert info.cuda is True  # libggml-cuda.so ships next to the programs
    assert sorted(info.binaries) == ["llama-cli", "llama-server", "test-backend-ops"]
    assert info.lineinfo is False and info.options == {}
    assert any("no CMakeCache.txt" in n for n in info.notes)
    assert info.staleness.checked is False
    assert info.git is None


def test_programs_without_cache_and_without_cuda_library(tmp_path, log_dir):
    write_exe(tmp_path / "rel" / "bin" / "llama-cli", "echo hi\n")
    info = inspect_build(tmp_path / "rel", log_dir=log_dir)
    assert info.cuda is None  # unknown, not False
    assert any("CUDA support unknown" in n for n in info.notes)


@pytest.mark.parametrize("case", ["missing", "file", "not-a-build"])
def test_not_a_build_is_a_usage_error(case, fixture_build, tmp_path, log_dir):
    if case == "missing":
        path = tmp_path / "nope"
    elif case == "file":
        path = tmp_path / "file.txt"
        path.write_text("x")
    else:
        path = fixture_build("not-a-build")
    with pytest.raises(UsageError) as err:
        inspect_build(path, log_dir=log_dir)
    assert "\n" not in str(err.value) and str(path.name) in str(err.value)


def test_binary_search_order_and_filters(tmp_path):
    root = tmp_path / "b"
    write_exe(root / "bin" / "test-backend-ops", "echo bin\n")
    write_exe(root / "test-backend-ops", "echo root\n")  # shadowed by bin/
    write_exe(root / "tests" / "test-kvarn", "echo tests\n")
    write_exe(root / "bin" / "Release" / "llama-server.exe", "echo win\n")
    write_exe(root / "bin" / "libggml.so.0.1", "")
    write_exe(root / "bin" / "libllama.dylib", "")
    write_exe(root / "bin" / "convert.py", "")
    (root / "bin" / "llama-cli").write_text("not executable")
    (root / "bin" / "kernel.cu").write_text("__global__ void k() {}\n")
    (root / "bin" / "kernel.cu").chmod(0o755)  # executable bit, but not a program
    (root / "bin" / "subdir").mkdir()
    (root / "bin" / "dangling").symlink_to(root / "nowhere")
    (root / "bin" / "link-to-prog").symlink_to(root / "tests" / "test-kvarn")
    found = find_binaries(root)
    assert sorted(found) == ["link-to-prog", "llama-server", "test-backend-ops", "test-kvarn"]
    assert found["test-backend-ops"] == root / "bin" / "test-backend-ops"
    assert found["llama-server"].name == "llama-server.exe"


def test_to_dict_is_json(fixture_build, log_dir):
    info = inspect_build(fixture_build("lineinfo"), log_dir=log_dir, check_staleness=False)
    assert isinstance(info, BuildInfo)
    doc = json.loads(json.dumps(info.to_dict()))
    assert doc["lineinfo"] is True and doc["cuda"] is True
    assert doc["binaries"]["test-backend-ops"].endswith("bin/test-backend-ops")
    assert doc["staleness"]["checked"] is False
    assert doc["git"] is None


def test_build_info_is_immutable(fixture_build, log_dir):
    info = inspect_build(fixture_build("lineinfo"), log_dir=log_dir, check_staleness=False)
    with pytest.raises(TypeError):
        info.options["GGML_CUDA"] = "OFF"  # type: ignore[index]
    with pytest.raises(AttributeError):
        info.cuda = False  # type: ignore[misc]


# --------------------------------------------------------------------------- git


def test_git_clean(git_repo, log_dir):
    state = git_state(git_repo, log_dir=log_dir)
    assert state is not None
    assert len(state.commit) == 40 and state.commit.startswith(state.short)
    assert state.describe == state.short
    assert state.dirty is False and state.dirty_files == () and state.dirty_count == 0
    assert state.branch == "main"


def test_git_dirty_tracked_file(git_repo, log_dir):
    (git_repo / "src.c").write_text("int main(void) { return 1; }\n")
    state = git_state(git_repo, log_dir=log_dir)
    assert state.dirty is True
    assert state.dirty_files == ("src.c",)
    assert state.describe.endswith("-dirty")


def test_reading_a_dirty_tree_leaves_its_git_index_untouched(git_repo, log_dir):
    """`git describe --dirty` rewrites .git/index, which llama.cpp's CMake lists as a configure
    dependency of build.ninja: kvdiag's look at a dirty tree made the user's build stale (H200,
    llama.cpp b9084). The index keeps its bytes and its mtime through git_state."""
    (git_repo / "src.c").write_text("int main(void) { return 2; }\n")
    index = git_repo / ".git" / "index"
    os.utime(index, (1_500_000_000, 1_500_000_000))
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    state = git_state(git_repo, log_dir=log_dir)
    assert state.dirty and state.describe.endswith("-dirty")
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_a_tree_whose_status_fails_is_not_called_clean(git_repo, log_dir):
    (git_repo / ".git" / "index").write_bytes(b"not an index")
    state = git_state(git_repo, log_dir=log_dir)
    assert state.dirty is True and state.dirty_files[0].startswith("(git status failed:")


def test_git_untracked_source_is_dirty_but_build_dir_is_not(git_repo, log_dir):
    build = git_repo / "build"
    (build / "bin").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("GGML_CUDA:BOOL=ON\n")
    state = git_state(git_repo, log_dir=log_dir, exclude=build)
    assert state.dirty is False, state
    (git_repo / "new-kernel.cu").write_text("// globbed by ggml-cuda\n")
    state = git_state(git_repo, log_dir=log_dir, exclude=build)
    assert state.dirty is True and state.dirty_files == ("new-kernel.cu",)
    assert not state.describe.endswith("-dirty")  # git describe ignores untracked files


def test_git_dirty_files_are_capped(git_repo, log_dir):
    for i in range(25):
        (git_repo / f"f{i:02d}.c").write_text("x\n")
    state = git_state(git_repo, log_dir=log_dir)
    assert len(state.dirty_files) == 20 and state.dirty_count == 25


def test_git_detached_head_and_tag(git_repo, log_dir):
    run(["git", "tag", "v1.0"], git_repo, log_dir, "t-git-tag")
    run(["git", "checkout", "-q", "--detach"], git_repo, log_dir, "t-git-detach")
    state = git_state(git_repo, log_dir=log_dir)
    assert state.branch is None
    assert state.describe == "v1.0"


def test_git_not_a_repo(tmp_path, git_env, log_dir):
    (tmp_path / "plain").mkdir()
    assert git_state(tmp_path / "plain", log_dir=log_dir) is None


def test_git_missing_is_no_state(tmp_path, git_env, log_dir, monkeypatch):
    (tmp_path / "plain").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    state, why = B.git_state_or_why(tmp_path / "plain", log_dir=log_dir, exclude=None)
    assert state is None and why.startswith("git not found")


def test_inspect_build_reads_git_of_source_dir(git_repo, log_dir):
    build = git_repo / "build"
    write_exe(build / "bin" / "llama-cli", "echo hi\n")
    (build / "CMakeCache.txt").write_text(
        f"CMAKE_HOME_DIRECTORY:INTERNAL={git_repo}\nCMAKE_GENERATOR:INTERNAL=Ninja\nGGML_CUDA:BOOL=OFF\n"
    )
    info = inspect_build(build, log_dir=log_dir, check_staleness=False)
    assert info.source_dir == git_repo
    assert info.git is not None and info.git.dirty is False and info.git.branch == "main"
    assert info.to_dict()["git"]["commit"] == info.git.commit


# --------------------------------------------------------------------------- staleness: ninja


NINJA_CP = """\
rule cc
  command = cp $in $out && chmod +x $out
  description = Building CUDA object $out
build bin/test-backend-ops: cc kernel.cu
"""


def stage_ninja(root: Path, log_dir: Path, cache: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "build.ninja").write_text(NINJA_CP)
    (root / "kernel.cu").write_text("#!/bin/sh\necho I am test-backend-ops\n")  # not executable itself
    if cache:
        (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Ninja\nGGML_CUDA:BOOL=ON\n")
    run(["ninja", "-C", root], root, log_dir, "t-ninja-build")
    return root


@needs_ninja
def test_ninja_current_then_stale(tmp_path, log_dir):
    root = stage_ninja(tmp_path / "b", log_dir)
    info = inspect_build(root, log_dir=log_dir)
    assert sorted(info.binaries) == ["test-backend-ops"]
    st = info.staleness
    assert (st.checked, st.stale, st.tool) == (True, False, "ninja -n")
    assert st.pending == () and "no work to do" in st.detail

    set_mtime(root / "kernel.cu", time.time() + 100)
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale) == (True, True)
    assert st.pending == ("Building CUDA object bin/test-backend-ops",)
    assert st.pending_count == 1
    assert "1 build step(s)" in st.detail and "bin/test-backend-ops" in st.detail


@needs_ninja
def test_ninja_without_cache_is_still_checked(tmp_path, log_dir):
    root = stage_ninja(tmp_path / "b", log_dir, cache=False)
    info = inspect_build(root, log_dir=log_dir)
    assert info.generator is None
    assert info.staleness.checked is True and info.staleness.stale is False


@needs_ninja
def test_ninja_stale_fixture(fixture_build, log_dir):
    st = inspect_build(fixture_build("ninja-stale"), log_dir=log_dir).staleness
    assert st.checked is True and st.stale is True
    assert st.pending == ("Building CUDA object obj/staged_kernel.cu.o", "Linking CXX executable bin/test-backend-ops")


@needs_ninja
def test_ninja_drops_found_programs_it_does_not_build(tmp_path, log_dir):
    root = stage_ninja(tmp_path / "b", log_dir)
    write_exe(root / "bin" / "copied-in-by-hand", "echo hi\n")
    st = inspect_build(root, log_dir=log_dir).staleness
    assert st.checked is True and st.stale is False
    assert "not build targets: bin/copied-in-by-hand" in st.detail


@needs_ninja
def test_ninja_explicit_targets(tmp_path, log_dir):
    root = stage_ninja(tmp_path / "b", log_dir)
    set_mtime(root / "kernel.cu", time.time() + 100)
    st = inspect_build(root, log_dir=log_dir, targets=["bin/test-backend-ops"]).staleness
    assert st.stale is True
    st = inspect_build(root, log_dir=log_dir, targets=["no-such-target"]).staleness
    assert st.checked is False and st.stale is None
    assert "unknown target 'no-such-target'" in st.detail


def test_ninja_missing(tmp_path, log_dir, monkeypatch):
    root = tmp_path / "b"
    root.mkdir()
    (root / "build.ninja").write_text(NINJA_CP)
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Ninja\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale, st.tool) == (False, None, "ninja -n")
    assert st.detail.startswith("ninja not found")


def fake_tool(tmp_path: Path, monkeypatch, name: str, script: str) -> None:
    bindir = tmp_path / "fakebin"
    write_exe(bindir / name, script)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin")


def test_ninja_manifest_regeneration(tmp_path, log_dir, monkeypatch):
    root = tmp_path / "b"
    root.mkdir()
    (root / "build.ninja").write_text("")
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Ninja\n")
    fake_tool(tmp_path, monkeypatch, "ninja", "echo \"ninja: Entering directory \\`$2'\"\necho '[0/1] Re-running CMake...'\n")
    st = inspect_build(root, log_dir=log_dir).staleness
    assert st.stale is True and st.pending == ("Re-running CMake...",)
    assert "regenerated" in st.detail


def test_ninja_timeout(tmp_path, log_dir, monkeypatch):
    root = tmp_path / "b"
    root.mkdir()
    (root / "build.ninja").write_text("")
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Ninja\n")
    fake_tool(tmp_path, monkeypatch, "ninja", "exec sleep 30\n")
    monkeypatch.setattr(staleness_mod, "STALENESS_TIMEOUT_S", 0.5)
    st = inspect_build(root, log_dir=log_dir).staleness
    assert st.checked is False and st.stale is None and "timed out" in st.detail


def test_unsupported_generator(tmp_path, log_dir):
    root = tmp_path / "b"
    root.mkdir()
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Visual Studio 17 2022\n")
    st = inspect_build(root, log_dir=log_dir).staleness
    assert st.checked is False and "Visual Studio" in st.detail


# --------------------------------------------------------------------------- staleness: make


# Shaped like CMake's Makefiles: a .PHONY top-level target (so `make -q` would always
# say "out of date") and cmake_echo_color lines announcing each step.
CMAKE_STYLE_MAKEFILE = """\
.PHONY: test-backend-ops
test-backend-ops: bin/test-backend-ops
bin/test-backend-ops: obj/staged_kernel.cu.o
\tcmake -E cmake_echo_color --switch= --green --bold --progress-dir=x --progress-num=2 "Linking CXX executable bin/test-backend-ops"
\tcp obj/staged_kernel.cu.o $@
obj/staged_kernel.cu.o: staged_kernel.cu
\tcmake -E cmake_echo_color --switch= --green --progress-dir=x --progress-num=1 "Building CUDA object obj/staged_kernel.cu.o"
\tmkdir -p obj && cp staged_kernel.cu $@
"""


@needs_make
def test_cmake_makefiles_stale_then_current(tmp_path, log_dir):
    root = tmp_path / "b"
    root.mkdir()
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Unix Makefiles\nGGML_CUDA:BOOL=ON\n")
    (root / "Makefile").write_text(CMAKE_STYLE_MAKEFILE)
    (root / "staged_kernel.cu").write_text("// a kernel\n")
    write_exe(root / "bin" / "test-backend-ops", "echo old\n")
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale, st.tool) == (True, True, "make -n")
    assert st.pending == ("Building CUDA object obj/staged_kernel.cu.o", "Linking CXX executable bin/test-backend-ops")

    (root / "obj").mkdir()
    (root / "obj" / "staged_kernel.cu.o").write_text("obj")
    now = time.time()
    set_mtime(root / "staged_kernel.cu", now - 30)
    set_mtime(root / "obj" / "staged_kernel.cu.o", now - 20)
    set_mtime(root / "bin" / "test-backend-ops", now - 10)
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale) == (True, False), st
    assert "targets test-backend-ops" in st.detail


@needs_make
def test_plain_makefile_make_q(tmp_path, log_dir):
    # an old llama.cpp Makefile build: no CMake, programs in the tree's root
    root = tmp_path / "tree"
    root.mkdir()
    (root / "Makefile").write_text("llama-cli: main.c\n\tcp main.c $@ && chmod +x $@\n")
    (root / "main.c").write_text("int main(void) { return 0; }\n")
    write_exe(root / "llama-cli", "echo hi\n")
    now = time.time()
    set_mtime(root / "main.c", now - 10)
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale, st.tool) == (True, False, "make -q")
    set_mtime(root / "main.c", now + 100)
    st = inspect_build(root, log_dir=log_dir).staleness
    assert (st.checked, st.stale) == (True, True)


def test_make_missing(tmp_path, log_dir, monkeypatch):
    root = tmp_path / "b"
    root.mkdir()
    (root / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Unix Makefiles\n")
    (root / "Makefile").write_text("all:\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    st = inspect_build(root, log_dir=log_dir).staleness
    assert st.checked is False and st.detail.startswith("make not found")
