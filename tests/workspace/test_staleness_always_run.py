"""D13 beside a command that runs on every build (llama.cpp's "Provisioning UI assets"), with real CMake, ninja, make.

The staged project (tests/staged_cmake.py) has the fork's shape
(tools/ui/CMakeLists.txt): an ``add_custom_target(... ALL BYPRODUCTS gen.h ...)``
whose output is never created, a library that includes its byproduct and
depends on it, and a normal object that includes a header of ours. ``ninja -n`` on the fresh build
lists the custom target and everything behind it; that must not be called
stale, while a touched header must still be.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from staged_cmake import write_sources
from target_helpers import run
from kvdiag.controls.staleness import staleness_control
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.observe import observe_staleness
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry
from kvdiag.workspace.staleness.ninja_explain import classify_causes, explained_causes
from kvdiag.workspace.staleness.check import check_build_staleness

needs_cmake_ninja = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                                       reason="cmake/ninja missing")
needs_cmake_make = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("make") is None,
                                      reason="cmake/make missing")

def stage(tmp_path: Path, log_dir: Path, generator: str) -> tuple[Path, Path]:
    src, build = write_sources(tmp_path / "src"), tmp_path / "build"
    run(["cmake", "-G", generator, "-S", src, "-B", build], tmp_path, log_dir, "t-configure")
    run(["cmake", "--build", build], tmp_path, log_dir, "t-build")
    return src, build


def touch_header(src: Path, name: str = "layout.h") -> None:
    later = time.time() + 5
    os.utime(src / name, (later, later))


def d13_verdict(staleness, generator: str, log_dir: Path) -> tuple[Verdict, str, tuple[str, ...]]:
    entry = load_registry().get("D13")
    obs = observe_staleness(entry.default_step, staleness.stale if staleness.checked else None,
                            "\n".join(staleness.evidence_lines()))
    attempt = judge_attempt(entry, obs, staleness_control(generator, log_dir), 1, 0.0)
    return attempt.verdict, attempt.reason, tuple(attempt.evidence.quoted)


@needs_cmake_ninja
def test_fresh_build_with_an_always_run_target_is_current_and_says_what_it_ignored(tmp_path, log_dir):
    _, build = stage(tmp_path, log_dir, "Ninja")
    st = check_build_staleness(build, generator="Ninja", log_dir=log_dir)
    assert (st.checked, st.stale, st.pending, st.pending_count) == (True, False, (), 0), st.detail
    assert st.ignored[0] == "Provisioning assets"
    assert any("uses_gen.c.o" in step for step in st.ignored)  # the object behind the byproduct
    assert "nothing to rebuild against the sources" in st.detail and "Provisioning assets" in st.detail
    assert st.ignored_because == (
        "Provisioning assets: output CMakeFiles/assets doesn't exist; a restat command that .ninja_log records "
        "as run and that never creates this output runs on every build (CMake's add_custom_target)",)
    verdict, reason, _ = d13_verdict(st, "Ninja", log_dir)
    assert verdict is Verdict.NOT_REPRODUCED, reason
    assert "Provisioning assets" in reason


@needs_cmake_ninja
def test_header_edit_beside_the_always_run_target_is_still_stale(tmp_path, log_dir):
    src, build = stage(tmp_path, log_dir, "Ninja")
    touch_header(src)
    st = check_build_staleness(build, generator="Ninja", log_dir=log_dir)
    assert (st.checked, st.stale) == (True, True), st.detail
    assert len(st.causes) == 1
    assert st.causes[0].startswith("output CMakeFiles/app.dir/main.c.o older than most recent input ")
    assert "layout.h" in st.causes[0]
    assert "Building C object CMakeFiles/app.dir/main.c.o" in st.pending
    assert "1 always-run command(s) among them: Provisioning assets" in st.detail
    verdict, reason, quoted = d13_verdict(st, "Ninja", log_dir)
    assert verdict is Verdict.CONFIRMED, reason
    assert any(q.startswith("because: output CMakeFiles/app.dir/main.c.o older than") for q in quoted)


@needs_cmake_ninja
def test_a_header_edit_hidden_behind_the_byproduct_is_found_by_the_recheck(tmp_path, log_dir):
    """uses_gen.c includes gen.h (the byproduct) and shared.h: ninja explains it only by "gen.h is dirty"."""
    src, build = stage(tmp_path, log_dir, "Ninja")
    touch_header(src, "shared.h")
    st = check_build_staleness(build, generator="Ninja", log_dir=log_dir)
    assert st.stale is True, st.detail
    assert len(st.causes) == 1
    assert st.causes[0].startswith("output CMakeFiles/uses_gen.dir/uses_gen.c.o older than most recent input ")
    assert "shared.h (re-checked: ninja named only an always-run command's byproduct)" in st.causes[0]
    verdict, reason, _ = d13_verdict(st, "Ninja", log_dir)
    assert verdict is Verdict.CONFIRMED, reason


@needs_cmake_ninja
def test_a_deleted_object_is_not_excused_as_always_run(tmp_path, log_dir):
    """Its output is missing too, but its rule is no restat command: it counts."""
    _, build = stage(tmp_path, log_dir, "Ninja")
    (build / "CMakeFiles" / "app.dir" / "main.c.o").unlink()
    st = check_build_staleness(build, generator="Ninja", log_dir=log_dir)
    assert st.stale is True
    assert "output CMakeFiles/app.dir/main.c.o doesn't exist" in st.causes


@needs_cmake_make
def test_cmake_makefiles_do_not_count_the_custom_targets_comment(tmp_path, log_dir):
    """`make -n` prints the always-run target's comment (not a Building/Linking step) and nothing behind it."""
    _, build = stage(tmp_path, log_dir, "Unix Makefiles")
    st = check_build_staleness(build, generator="Unix Makefiles", log_dir=log_dir, targets=["app"])
    assert (st.checked, st.stale) == (True, False), st.detail
    assert "compiler dependency file(s) not yet folded in by CMake also checked" in st.detail


@needs_cmake_make
def test_a_header_edit_after_a_first_make_build_is_seen_through_the_depfiles(tmp_path, log_dir):
    """After one build compiler_depend.make is still CMake's placeholder: `make -n` knows no header."""
    src, build = stage(tmp_path, log_dir, "Unix Makefiles")
    touch_header(src)
    st = check_build_staleness(build, generator="Unix Makefiles", log_dir=log_dir, targets=["app"])
    assert (st.stale, st.pending) == (True, ()), st.detail
    assert st.causes[0].startswith("output CMakeFiles/app.dir/main.c.o older than most recent input ")
    assert "layout.h (from main.c.o.d" in st.causes[0]
    verdict, reason, quoted = d13_verdict(st, "Unix Makefiles", log_dir)
    assert verdict is Verdict.CONFIRMED, reason
    assert any("layout.h" in q for q in quoted)


@needs_cmake_make
def test_a_header_edit_after_the_depfiles_are_folded_in_is_seen_by_make(tmp_path, log_dir):
    src, build = stage(tmp_path, log_dir, "Unix Makefiles")
    run(["cmake", "--build", build], tmp_path, log_dir, "t-build-again")  # the depend step folds the .d files in
    assert not (build / "CMakeFiles/app.dir/compiler_depend.make").read_text().startswith("# Empty")
    touch_header(src)
    st = check_build_staleness(build, generator="Unix Makefiles", log_dir=log_dir, targets=["app"])
    assert st.stale is True and "Building C object CMakeFiles/app.dir/main.c.o" in st.pending, st.detail


FORCE_NINJA = """rule gen
  command = cp gen.in $out
  description = Generating $out
rule cc
  command = cp $in $out
  description = Building C object $out
build always: phony
build gen.h: gen | always
build obj.o: cc src.c | gen.h
default obj.o
"""


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not installed")
def test_a_phony_force_target_is_always_run_too(tmp_path, log_dir):
    """The hand-written-ninja form of the same thing: an input-less phony edge everything depends on."""
    for name, text in {"build.ninja": FORCE_NINJA, "gen.in": "x\n", "src.c": "int x;\n"}.items():
        (tmp_path / name).write_text(text)
    run(["ninja", "-C", tmp_path], tmp_path, log_dir, "t-ninja")
    st = check_build_staleness(tmp_path, generator=None, log_dir=log_dir, targets=["obj.o"])
    assert (st.stale, st.ignored) == (False, ("Generating gen.h", "Building C object obj.o")), st.detail
    assert st.ignored_because[0].startswith("a command: output always of phony edge with no inputs doesn't exist")


def test_explanations_keep_root_causes_and_unknown_ones_count(tmp_path):
    text = ("ninja: Entering directory `b'\n"
            "ninja explain: output CMakeFiles/assets doesn't exist\n"
            "ninja explain: CMakeFiles/assets is dirty\n"
            "ninja explain: command line changed for obj.o\n"
            "ninja explain: deps for 'x.o' are missing\n")
    assert explained_causes(text) == ["output CMakeFiles/assets doesn't exist", "command line changed for obj.o",
                                      "deps for 'x.o' are missing"]
    # no build.ninja, no .ninja_log: nothing proves a command always runs, so everything counts
    assert [c.always_run for c in classify_causes(text, tmp_path)] == [False, False, False]
