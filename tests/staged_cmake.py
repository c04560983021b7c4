"""A staged CMake C project with llama.cpp's shape, for the tests that build one for real.

An ``add_custom_target(... ALL BYPRODUCTS gen.h ...)`` whose output is never created (the
fork's tools/ui/CMakeLists.txt, "Provisioning UI assets"), a library that includes its
byproduct and depends on it, and a program ``app`` that includes a header of ours
(``layout.h``, the header whose edit D13 is about). The sources are dated an hour back,
older than anything the build writes.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

CMAKELISTS = """cmake_minimum_required(VERSION 3.18)
project(stage C)
add_custom_target(assets ALL
  BYPRODUCTS ${CMAKE_CURRENT_BINARY_DIR}/gen.h
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${CMAKE_CURRENT_SOURCE_DIR}/gen.h.in ${CMAKE_CURRENT_BINARY_DIR}/gen.h
  COMMENT "Provisioning assets" VERBATIM)
add_library(uses_gen STATIC uses_gen.c)
target_include_directories(uses_gen PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
add_dependencies(uses_gen assets)
add_executable(app main.c)
target_link_libraries(app uses_gen)
"""

SOURCES = {
    "CMakeLists.txt": CMAKELISTS,
    "gen.h.in": "#define GEN 1\n",
    "layout.h": "struct task_params { int n; };\n",
    "shared.h": "#define SHARED 0\n",
    "uses_gen.c": '#include "gen.h"\n#include "shared.h"\nint gen(void) { return GEN + SHARED; }\n',
    "main.c": '#include "layout.h"\nint gen(void);\nint main(void) { struct task_params p = { gen() }; return p.n - 1; }\n',
}


def write_sources(src: Path) -> Path:
    src.mkdir(parents=True)
    past = time.time() - 3600
    for name, text in SOURCES.items():
        (src / name).write_text(text)
        os.utime(src / name, (past, past))
    return src


def built_with_ninja(ninja: str, root: Path) -> tuple[Path, Path]:
    """The project configured for ``ninja`` (CMAKE_MAKE_PROGRAM, a path) and built by it: (src, build)."""
    src, build = write_sources(root / "src"), root / "build"
    subprocess.run(["cmake", "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}", "-S", src, "-B", build],
                   check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", build], check=True, capture_output=True, timeout=300)
    return src, build
