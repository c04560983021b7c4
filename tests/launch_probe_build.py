"""The launch probe's interposer code, taken out of probes/test-backend-ops-launch.patch and built
into a small executable, for the CPU test (stand-in runtime) and the GPU test (the real one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "probes" / "test-backend-ops-launch.patch"
SCENARIO = ROOT / "tests" / "scenarios" / "launch_probe"
MAIN = '\nextern "C" int launch_all(void);\nint main() { return launch_all(); }\n'


def interposer_source() -> str:
    """The lines the probe adds after `static std::mutex g_test_output_mutex;`, and its includes."""
    lines = PATCH.read_text().splitlines()
    added_includes = [line[1:] for line in lines if line.startswith("+#include")]
    start = next(i for i, line in enumerate(lines) if line.startswith(" static std::mutex g_test_output_mutex;"))
    block: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("+"):
            block.append(line[1:])
        elif block or line.startswith("@@"):
            break
    return "\n".join(["#include <cstdio>", "#include <cstdlib>", "#include <cstddef>", *added_includes, *block]) + MAIN


def build_main(folder: Path, library: Path) -> Path:
    """The interposers and a main() calling `launch_all` of ``library``, linked as kvdiag links the probe."""
    source = folder / "main.cpp"
    source.write_text(interposer_source())
    exe = folder / "main"
    subprocess.run(["c++", "-std=c++17", "-o", str(exe), str(source), f"-L{library.parent}",
                    f"-l:{library.name}", f"-Wl,-rpath,{library.parent}", "-ldl", "-rdynamic"], check=True)
    return exe
