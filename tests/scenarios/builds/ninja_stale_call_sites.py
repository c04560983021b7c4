#!/usr/bin/env python3
"""Stand-in ninja: the object fails as the fork's KVarN instance fails with the repair's two
nullptrs removed (nvcc 13's output, recorded in tests/fixtures/compile), exit 1."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeninja import REPO, main  # noqa: E402

RECORDED = REPO / "tests" / "fixtures" / "compile" / "nvcc-d7-stale-call-sites.log"


def build(build_dir: Path, objects: list[str]) -> int:
    lines = RECORDED.read_text().splitlines(keepends=True)
    sys.stdout.write("".join(lines[1:]))     # its first line is ninja's "Entering directory"
    return 1


main(build)
