"""kvdiag's CUPTI launch lister on a GPU: every launch named, in its case, whatever links the runtime.

The scenario (tests/scenarios/launches_named_kernels_between_cases.cu) prints case lines around three
launches: scale_by<2> and scale_by<3> through <<<>>>, add_one through the driver's cuLaunchKernel.
Built with the static and with the shared CUDA runtime (an LD_PRELOAD interposer would see only the
second); stdout goes to a file, not a terminal, as in a sanitized run. Under compute-sanitizer the
lister either lists (its ready line, then the launches) or says nothing at all, never a ready line
without launches: kvdiag reads a run without the ready line as unlisted.

    python3 -m pytest -q -p no:cacheprovider -m gpu tests/workspace/test_launch_lister_gpu.py -s
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpu_checks import compile_scenario, real_sanitizer
from kvdiag.parse.launches import LISTER_READY, parse_launches
from kvdiag.workspace.launch_lister import LISTER_DISABLE_ENV, build_lister

pytestmark = pytest.mark.gpu
SCENARIO = "launches_named_kernels_between_cases.cu"
KERNELS = ["scale_by<2>", "scale_by<3>", "add_one"]


@pytest.fixture(scope="module")
def lister(tmp_path_factory):
    real_sanitizer()
    os.environ[LISTER_DISABLE_ENV] = "1"
    home = tmp_path_factory.mktemp("lister-home")
    library = build_lister(home, log_dir=tmp_path_factory.mktemp("lister-logs"))
    assert library.available, library.why_not
    return library.path


def run_listed(argv: list[str], library: Path, tmp_path: Path) -> tuple[str, str]:
    log = tmp_path / "launches.log"
    env = {**os.environ, "CUDA_INJECTION64_PATH": str(library), "KVDIAG_PRINT_LAUNCHES": "1",
           "KVDIAG_LAUNCH_LOG": str(log)}
    with open(tmp_path / "stdout.txt", "wb") as out:          # a file: fully buffered stdio, as under kvdiag
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.PIPE, timeout=300)
    text = (tmp_path / "stdout.txt").read_text(errors="replace")
    print(f"\n--- {' '.join(argv[:3])} (exit {done.returncode})\n{text}{done.stderr.decode(errors='replace')[-2000:]}")
    return text, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("cudart", ["static", "shared"])
def test_every_launch_is_named_inside_its_case(lister, tmp_path, cudart):
    program = compile_scenario(SCENARIO, tmp_path, f"-cudart={cudart}")
    text, log = run_listed([str(program)], lister, tmp_path)
    lines = text.splitlines()
    assert lines[0].startswith(LISTER_READY)
    assert [launch.kernel for launch in parse_launches(text)] == KERNELS
    for kernel, case in zip(KERNELS, ("scale<2>", "scale<3>", "add_one (driver)")):
        at = next(i for i, line in enumerate(lines) if line.startswith("kvdiag-launch: ") and kernel.split("<")[0] in line
                  and (("<" not in kernel) or kernel.split("<")[1].rstrip(">") + ">" in line))
        assert lines[at - 1] == f"begin case {case}" and lines[at + 1].startswith(f"end case {case}: OK")
    assert len([line for line in log.splitlines() if "kvdiag-launch-lister" not in line]) == 3


@pytest.mark.parametrize("tool", ["memcheck", "synccheck"])
def test_under_the_sanitizer_it_lists_everything_or_says_nothing(lister, tmp_path, tool):
    program = compile_scenario(SCENARIO, tmp_path, "-cudart=shared")
    text, _ = run_listed([str(real_sanitizer()), "--tool", tool, str(program)], lister, tmp_path)
    if LISTER_READY in text:
        assert [launch.kernel for launch in parse_launches(text)] == KERNELS
    else:
        assert parse_launches(text) == ()
