"""Device session 13 on the H200 (tests/fixtures/device/h200-session13): D1's bisection resumed from session 12's,
which had resumed from session 10's. The old end must come through two abandoned bisections with its evidence
still named, and the new end's build record must show why one device call cannot hold it."""

from __future__ import annotations

import tarfile
from pathlib import Path

from kvdiag.engine.bisect_resume import load_resumed, read_resumed
from kvdiag.engine.bisect_step import read_steps
from kvdiag.engine.scratch_build import BuildRecipe
from kvdiag.records.bisect import Direction
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunStore

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "device"
SESSION10 = "20261203-083120.720411-0001-D1-bisect"
SESSION12 = "20261203-231300.373927-0001-D1-bisect"
SESSION13 = "20261204-012256.266042-0001-D1-bisect"
OLD_END = "a12d7e228046b06faa6e17d7713dc50db8c94d11"
CONFIGURE = ("cmake -S {source} -B {build} -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "
             "-DCMAKE_CUDA_FLAGS=-lineinfo -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_WEBUI=OFF")
BUILD = "ninja -C {build} -j {jobs} test-backend-ops"


def _store(root: Path, *sessions: str) -> RunStore:
    for session in sessions:
        with tarfile.open(FIXTURES / session / "store.tar.gz") as archive:
            archive.extractall(root, filter="data")
    return RunStore(root)


def _resume(store: RunStore, run_id: str):
    d1 = load_registry(REPO / "registry").get("D1")
    recipe = BuildRecipe(configure_cmd=CONFIGURE, build_cmd=BUILD, jobs=None, launcher=None)
    return load_resumed(store, run_id, d1, recipe, None, Direction.CAUSE, lambda: ["sm_90"])


def test_on_the_device_the_old_end_came_through_session_12_from_session_10(tmp_path: Path):
    store = _store(tmp_path, "h200-session13")
    taken = read_resumed(store.root / SESSION13 / "resume.json")
    assert taken.run_id == SESSION12 and taken.status == "abandoned" and taken.passed_over == ()
    (old,) = read_steps(store.root / SESSION13 / "bisect-steps.json")
    assert (old.commit, old.verdict, old.reused_from, old.build_s) == (OLD_END, "not-reproduced", SESSION10, 1266.698)


def test_the_next_session_can_resume_from_session_13_with_all_three_stores(tmp_path: Path):
    taken = _resume(_store(tmp_path, "h200-session10", "h200-session12", "h200-session13"), SESSION13)
    assert taken.status == "abandoned" and list(taken.steps) == [OLD_END] and taken.passed_over == ()
    assert taken.take(OLD_END, "old end").reused_from == SESSION10


def test_a_resumed_resume_without_the_first_evidence_run_builds_the_old_end_again(tmp_path: Path):
    """Sessions 12 and 13 hold no evidence of their own for a12d7e228: only session 10's run does."""
    taken = _resume(_store(tmp_path, "h200-session12", "h200-session13"), SESSION13)
    assert taken.steps == {}
    ((commit, why),) = taken.passed_over
    assert commit == OLD_END and "20261203-085236.064266-0004-D1" in why


def _ninja_rows() -> list[tuple[float, float, str]]:
    lines = (FIXTURES / "h200-session13" / "new-end-partial.ninja_log").read_text().splitlines()
    return [(int(f[0]) / 1000, int(f[1]) / 1000, f[3]) for f in (line.split("\t") for line in lines[1:])]


def test_the_new_ends_build_is_longer_than_one_device_call():
    """145 of 521 objects in 520.5 s; six KVarN MMA instances took 335-361 s each; the other ten were compiling."""
    rows = _ninja_rows()
    assert len(rows) == 145 and max(end for _, end, _ in rows) == 520.537
    kvarn = sorted(end - start for start, end, name in rows if "fattn-mma-kvarn-instance-" in name)
    assert len(kvarn) == 6 and 335 < kvarn[0] and kvarn[-1] < 362
    assert round(sum(end - start for start, end, _ in rows)) == 4391
    ps = (FIXTURES / "h200-session13" / "ps-at-521s.txt").read_text()
    still = {line.split("fattn-mma-kvarn-instance-")[1].split(".")[0] for line in ps.splitlines()
             if "fattn-mma-kvarn-instance-" in line}
    done = {name.split("fattn-mma-kvarn-instance-")[1].split(".")[0] for *_, name in rows
            if "fattn-mma-kvarn-instance-" in name}
    assert len(still) == 10 and not still & done


def test_no_machine_path_is_left_in_the_record():
    with tarfile.open(FIXTURES / "h200-session13" / "store.tar.gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                text = archive.extractfile(member).read().decode("utf-8", "replace")
                assert "/tmp/d/" not in text and "kvdiag-bisect-D1-" not in text, member.name
