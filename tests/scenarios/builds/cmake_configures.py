#!/usr/bin/env python3
"""Stand-in cmake: a configure that writes build.ninja into -B and appends its argv to
$FAKE_CMAKE_LOG. The -D names listed in $FAKE_CMAKE_UNUSED are reported as CMake reports
variables no CMakeLists.txt reads; with $FAKE_CMAKE_FAILS it fails as a configure without a
CUDA compiler does."""
import os
import sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_CMAKE_LOG"], "a") as fh:
    fh.write(" ".join(args) + "\n")
if os.environ.get("FAKE_CMAKE_FAILS"):
    print("-- The CUDA compiler identification is unknown")
    print("CMake Error at ggml/src/ggml-cuda/CMakeLists.txt:3 (enable_language):", file=sys.stderr)
    print("  No CMAKE_CUDA_COMPILER could be found.", file=sys.stderr)
    sys.exit(1)
build_dir = Path(args[args.index("-B") + 1])
build_dir.mkdir(parents=True, exist_ok=True)
(build_dir / "build.ninja").write_text("# stand-in\n")
print("-- CUDA KVarN compilation: ON (15 fast-decode pairs)")
print("-- Configuring done")
print("-- Generating done")
unused = [a[2:].split("=")[0] for a in args if a.startswith("-D")
          and a[2:].split("=")[0] in os.environ.get("FAKE_CMAKE_UNUSED", "").split(",")]
if unused:
    print("CMake Warning:\n  Manually-specified variables were not used by the project:\n", file=sys.stderr)
    for name in unused:
        print(f"    {name}", file=sys.stderr)
    print("", file=sys.stderr)
print(f"-- Build files have been written to: {build_dir}")
