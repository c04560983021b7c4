"""The rule of kvdiag.parse.case_segments against the real compute-sanitizer on a real GPU.

A staged program (tests/scenarios/prints_cases_after_divergent_barriers.cu) prints its
cases the way current test-backend-ops does, after each case's kernel, with real
synccheck findings in some of them. On a terminal every finding lands in its own case;
through a pipe the same output puts them one case early, which is why scan batches run
on a terminal. Runs only where a GPU, compute-sanitizer and nvcc are present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_checks import compile_scenario, real_sanitizer
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.runner import run_command
from kvdiag.proc.sanitizer import SanitizerInvocation

pytestmark = pytest.mark.gpu
CASES = ["c=0", "d=1", "e=0", "f=0", "g=1", "h=1", "i=0"]


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return compile_scenario("prints_cases_after_divergent_barriers.cu", tmp_path_factory.mktemp("cu"), "-lineinfo")


def run_batch(program: Path, tmp_path: Path, tty: bool) -> str:
    inv = SanitizerInvocation("synccheck", print_limit=0, destroy_on_device_error="kernel",
                              options=("--show-backtrace", "no"))
    r = run_command(inv.argv(real_sanitizer(), None, [str(program), *CASES]), timeout=300, log_dir=tmp_path,
                    name="batch", tty=tty)
    assert r.returncode == 99, r.describe()
    return strip_ansi(r.stdout_text())


def divergent(split) -> list[str]:
    return [s.case.params for s in split.segments if s.findings]


def test_on_a_terminal_every_finding_lands_in_its_own_case(program, tmp_path):
    split = split_cases(run_batch(program, tmp_path, tty=True), "synccheck")
    assert [s.case.params for s in split.segments] == CASES
    assert split.problems() == ()
    assert divergent(split) == [c for c in CASES if c.endswith("=1")]
    assert all(f.kind == "barrier-divergence" for s in split.segments for f in s.findings)


def test_through_a_pipe_the_findings_land_one_case_early(program, tmp_path):
    split = split_cases(run_batch(program, tmp_path, tty=False), "synccheck")
    assert split.problems() == ()
    early = [CASES[CASES.index(c) - 1] for c in CASES if c.endswith("=1")]
    assert divergent(split) == early
