"""The control for D13's detector: does this machine's dry run of the build tool see staleness?

A `ninja -n` or `make -n` that reports "nothing to do" is only evidence that a
build is current if the same dry run, on this machine, does report work when
there is some. The control stages a two-file build whose output is missing, in
the generator's own form, and runs the same check kvdiag runs on the user's
build (`kvdiag.target.build.check_build_staleness`): it must say stale. The
ninja form also has an always-run command in front of the object (the shape of
llama.cpp's "Provisioning UI assets"), so the check's discounting of such
commands is shown not to hide the missing object behind it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvdiag.controls.gate import Gate
from kvdiag.target.build import check_build_staleness

_NINJA = """rule copy
  command = cp $in $out
  description = Building CUDA object $out
rule always
  command = touch assets.h
  description = Provisioning UI assets
  restat = 1
build CMakeFiles/assets assets.h: always
build out/kernel.o: copy kernel.cu | assets.h
build bin/test-backend-ops: copy out/kernel.o
default bin/test-backend-ops
"""

# the always-run command has run before and left its output absent, as after a real build
_NINJA_LOG = "# ninja log v5\n0\t1\t0\tCMakeFiles/assets\t0\n0\t1\t0\tassets.h\t0\n"

_CMAKE_MAKEFILE = """.PHONY: test-backend-ops
test-backend-ops: bin/test-backend-ops
bin/test-backend-ops: kernel.cu
\tcmake -E cmake_echo_color --switch= --progress-dir=x --progress-num=1 "Building CUDA object out/kernel.o"
\tmkdir -p bin && cp kernel.cu $@
"""

_PLAIN_MAKEFILE = """bin/test-backend-ops: kernel.cu
\tmkdir -p bin && cp kernel.cu $@
"""


def staleness_control(generator: str | None, log_dir: Path) -> Gate:
    """Gate for a not-reproduced from the staleness check of a build made by `generator`."""
    gen = generator or "Ninja"
    if gen.startswith("Ninja"):
        files, cmake_generator = {"build.ninja": _NINJA, ".ninja_log": _NINJA_LOG, "assets.h": ""}, "Ninja"
    elif gen.endswith("Makefiles") and not gen.startswith("NMake"):
        files, cmake_generator = {"Makefile": _CMAKE_MAKEFILE}, "Unix Makefiles"
    else:
        files, cmake_generator = {"Makefile": _PLAIN_MAKEFILE}, None
    with tempfile.TemporaryDirectory(prefix="kvdiag-staleness-control-") as tmp:
        root = Path(tmp)
        (root / "kernel.cu").write_text("// staged by kvdiag: the output below is missing\n")
        for name, text in files.items():
            (root / name).write_text(text)
        staleness = check_build_staleness(root, generator=cmake_generator, log_dir=log_dir,
                                          targets=["test-backend-ops"] if cmake_generator != "Ninja"
                                          else ["bin/test-backend-ops"])
    if staleness.checked and staleness.stale:
        return Gate(True, f"the {staleness.tool} control saw a staged stale build on this machine")
    return Gate(False, f"the {staleness.tool or 'dry run'} control did not see a staged stale build "
                       f"({staleness.detail}): its 'nothing to rebuild' proves nothing here")
