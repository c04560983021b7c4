"""Device session 10 on the H200 (tests/fixtures/device/h200-session10): D1's cause bisection from a12d7e228,
cut short by the end of the session's device time while the new end was building. The run store it left is
the fixture; `kvdiag bisect --resume` must take its judged old end, and nothing it cannot vouch for."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from kvdiag.engine.bisect.resume import load_resumed
from kvdiag.engine.bisect.step import read_steps
from kvdiag.workspace.scratch_build import BuildRecipe
from kvdiag.errors import UsageError
from kvdiag.records.bisect import GOOD, Direction
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunStore

from recorded_d1_bisection import BUILD, CONFIGURE, FIXTURES, OLD_END, REPO, resume
from recorded_d1_bisection import SESSION10 as BISECTION

HERE = FIXTURES / "h200-session10"


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    with tarfile.open(HERE / "store.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return RunStore(tmp_path)


@pytest.fixture(scope="module")
def d1():
    return load_registry(REPO / "registry").get("D1")


def resumed(store: RunStore, d1, **recipe):
    return resume(store, BISECTION, d1, **recipe)


def test_the_recorded_old_end_held_after_a_full_build_of_twenty_one_minutes(store: RunStore):
    (old,) = read_steps(store.root / BISECTION / "bisect-steps.json")
    assert old.commit == OLD_END and old.role == "old end"
    assert old.verdict == "not-reproduced" and old.exit == GOOD
    assert old.reason.startswith("16 matching case(s) executed (16 OK, 0 FAIL)")
    assert (old.configure_s, old.build_s, old.run_s) == (5.527, 1266.698, 2.248)
    build_log = store.root / "20261203-083121.966321-0002-D1-bisect-step" / "logs" / "bisect-build.stdout.log"
    assert build_log.read_text().splitlines()[-1].startswith("[512/512] ")


def test_resume_takes_the_judged_old_end_on_the_same_gpu_and_commands(store: RunStore, d1):
    taken = resumed(store, d1)
    assert taken.status == "abandoned"               # the machine went away with the run "running"
    assert list(taken.steps) == [OLD_END] and taken.passed_over == ()
    step = taken.take(OLD_END, "old end")
    assert step.reused_from == BISECTION and step.verdict == "not-reproduced" and step.build_s == 1266.698
    assert taken.take("c9e746733" + "0" * 31, "new end") is None


def test_another_job_count_or_a_compiler_launcher_still_takes_it(store: RunStore, d1):
    assert list(resumed(store, d1, jobs=8, launcher="ccache").steps) == [OLD_END]


@pytest.mark.parametrize(("change", "why"), [
    ({"archs": ("sm_89",)}, "its run was on sm_90, this machine has sm_89"),
    ({"archs": ()}, "its run was on sm_90 and no GPU is visible here"),
    ({"configure": CONFIGURE.replace(" -DCMAKE_CUDA_FLAGS=-lineinfo", "")},
     "its configure command differs: cmake -S {source} -B {build} -G Ninja -DGGML_CUDA=ON "
     "-DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo"),
    ({"build": "ninja -C {build} -j {jobs} test-backend-ops llama-server"},
     "its build command differs: ninja -C {build} -j {jobs} test-backend-ops"),
    ({"step": "seed-shape"}, "its run ran repro step 'fast', this bisection runs 'seed-shape'"),
])
def test_a_step_judged_under_other_conditions_is_built_again(store: RunStore, d1, change, why):
    taken = resumed(store, d1, **change)
    assert taken.steps == {}
    ((commit, reason),) = taken.passed_over
    assert commit == OLD_END and reason.startswith(why)


def test_a_step_whose_evidence_did_not_travel_is_built_again(store: RunStore, d1):
    shutil.rmtree(store.root / "20261203-085236.064266-0004-D1")
    taken = resumed(store, d1)
    assert taken.steps == {}
    assert taken.passed_over == (
        (OLD_END, "its run 20261203-085236.064266-0004-D1 is not in this run store, or cannot be read"),)


def test_resume_from_a_step_run_instead_of_the_bisection_is_a_usage_error(store: RunStore, d1):
    with pytest.raises(UsageError, match=r"is not a bisection of D1 \(it is D1-bisect-step\)"):
        load_resumed(store, "20261203-085238.639292-0005-D1-bisect-step", d1,
                     BuildRecipe(configure_cmd=CONFIGURE, build_cmd=BUILD), None, Direction.CAUSE, lambda: ["sm_90"])
