"""A probe built into the user's test program by recompiling one file and relinking it (probes.program_rebuild).

The commands are read from `ninja -t commands`: a recorded listing of a real CPU build of ggml
d99724f2 (tests/fixtures/build/ggml-d99724f2-cpu.ninja-commands.txt, made on this machine) for
the parsing; a tiny ninja project staged here (a library and a `tests/test-backend-ops.cpp`
that prints a word, linked as CMake links, `: && c++ … && :`) for the whole path: the probe's
program is made in kvdiag's home, runs patched, is reused, and the build folder is not touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kvdiag.probes.patch import parse_probe_file
from kvdiag.probes.program_rebuild import probe_program
from kvdiag.workspace.program_recipe import RecipeUnavailable, parse_recipe

LISTING = Path(__file__).resolve().parents[1] / "fixtures" / "build" / "ggml-d99724f2-cpu.ninja-commands.txt"
needs_tools = pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("c++") and shutil.which("git")),
                                 reason="needs ninja, c++ and git")


def test_the_recorded_listing_gives_the_programs_compile_and_link_commands():
    recipe = parse_recipe(LISTING.read_text(), Path("/b"), "bin/test-backend-ops")
    assert recipe.source.name == "test-backend-ops.cpp"
    assert recipe.obj == "tests/CMakeFiles/test-backend-ops.dir/test-backend-ops.cpp.o"
    assert recipe.link[0] == "/usr/bin/c++" and recipe.link[-1] == "src/libggml-base.so.0.21.0"
    compile_argv = recipe.compile_into(Path("/k/src/tests/test-backend-ops.cpp"), Path("/k/t.o"))
    assert "-MD" not in compile_argv and "-MF" not in compile_argv
    assert compile_argv[compile_argv.index("-o") + 1] == "/k/t.o"
    assert compile_argv[compile_argv.index("-c") + 1] == "/k/src/tests/test-backend-ops.cpp"
    assert "-DGGML_USE_CPU" in compile_argv and "-std=gnu++17" in compile_argv
    link = recipe.link_into(Path("/k/t.o"), Path("/k/test-backend-ops"), ("-rdynamic",))
    assert link[link.index("-o") + 1] == "/k/test-backend-ops" and "/k/t.o" in link and link[-1] == "-rdynamic"
    assert [p.name for p in recipe.link_inputs()] == ["libggml.so.0.21.0", "libggml-cpu.so.0.21.0",
                                                      "libggml-base.so.0.21.0"]


def test_a_listing_without_the_program_is_a_reason():
    with pytest.raises(RecipeUnavailable, match="no command that writes bin/other"):
        parse_recipe(LISTING.read_text(), Path("/b"), "bin/other")


PROGRAM = '#include <cstdio>\nint word();\nint main() {\n    printf("plain %d\\n", word());\n    return 0;\n}\n'
PROBE = """kvdiag-probe: say-probed
defect: any
kind: instrument
repository: https://example.invalid/repo
commit: 0000000
path-prefix: tests
output-correct: yes
requires: none
summary: prints probed instead of plain
---
diff --git a/tests/test-backend-ops.cpp b/tests/test-backend-ops.cpp
--- a/tests/test-backend-ops.cpp
+++ b/tests/test-backend-ops.cpp
@@ -3,3 +3,3 @@ int word();
 int main() {
-    printf("plain %d\\n", word());
+    printf("probed %d\\n", word());
     return 0;
"""


def stage_project(root: Path) -> Path:
    """A source tree and a ninja build of it, the way CMake writes one (relative objects, rpath)."""
    src, build = root / "src", root / "build"
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test-backend-ops.cpp").write_text(PROGRAM)
    (src / "word.cpp").write_text("int word() { return 42; }\n")
    (build / "bin").mkdir(parents=True)
    (build / "build.ninja").write_text(f"""rule cxx
  command = c++ -O1 -MD -MT $out -MF $out.d -o $out -c $in
rule so
  command = : && c++ -shared -Wl,-soname,libword.so -o $out $in && :
rule exe
  command = : && c++ -O1 $in -o $out -Wl,-rpath,{build}/bin bin/libword.so && :
build obj/word.o: cxx {src}/word.cpp
build bin/libword.so: so obj/word.o
build obj/test-backend-ops.cpp.o: cxx {src}/tests/test-backend-ops.cpp
build bin/test-backend-ops: exe obj/test-backend-ops.cpp.o | bin/libword.so
""")
    subprocess.run(["ninja", "-C", str(build)], check=True, capture_output=True)
    return build


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@needs_tools
def test_the_probe_program_is_made_in_the_home_runs_patched_and_is_reused(tmp_path):
    build = stage_project(tmp_path)
    probe_file = tmp_path / "say-probed.patch"
    probe_file.write_text(PROBE)
    probe = parse_probe_file(probe_file)
    before = snapshot(build) | {f"src/{k}": v for k, v in snapshot(tmp_path / "src").items()}
    home, logs = tmp_path / "home", tmp_path / "logs"
    made = probe_program(build, build / "bin" / "test-backend-ops", probe, home=home, log_dir=logs)
    assert made.available and not made.reused, made.why_not
    assert home in made.path.parents
    out = subprocess.run([str(made.path)], capture_output=True, text=True, check=True).stdout
    assert out == "probed 42\n"
    assert subprocess.run([str(build / "bin" / "test-backend-ops")], capture_output=True, text=True).stdout == "plain 42\n"
    assert snapshot(build) | {f"src/{k}": v for k, v in snapshot(tmp_path / "src").items()} == before
    again = probe_program(build, build / "bin" / "test-backend-ops", probe, home=home, log_dir=logs)
    assert again.reused and again.path == made.path
    os.utime(build / "bin" / "libword.so", ns=(1, 1))          # a relinked library is another program
    other = probe_program(build, build / "bin" / "test-backend-ops", probe, home=home, log_dir=logs)
    assert other.available and not other.reused and other.path != made.path


@needs_tools
def test_a_probe_that_does_not_apply_or_a_build_without_ninja_is_a_reason(tmp_path):
    build = stage_project(tmp_path)
    probe_file = tmp_path / "say-probed.patch"
    probe_file.write_text(PROBE.replace('-    printf("plain', '-    printf("other'))
    made = probe_program(build, build / "bin" / "test-backend-ops", parse_probe_file(probe_file),
                         home=tmp_path / "home", log_dir=tmp_path / "logs")
    assert not made.available and made.why_not.startswith("probe-program-apply failed")
    assert not any((tmp_path / "home" / "probe-programs").glob("*/test-backend-ops"))
    (build / "build.ninja").unlink()
    made = probe_program(build, build / "bin" / "test-backend-ops", parse_probe_file(probe_file),
                         home=tmp_path / "home", log_dir=tmp_path / "logs")
    assert made.why_not.endswith("is not a ninja build (no build.ninja): only ninja builds list their commands")
