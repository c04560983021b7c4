"""D1's cause bisection as the device sessions recorded it (tests/fixtures/device/h200-session10, -12, -13, -14): the
commands every session ran, and the run stores read back and resumed as the next session would."""

from __future__ import annotations

import tarfile
from pathlib import Path

from kvdiag.engine.bisect.resume import load_resumed
from kvdiag.workspace.scratch_build import BuildRecipe
from kvdiag.records.bisect import Direction
from kvdiag.registry.loader import load_registry
from kvdiag.store.runs import RunStore

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "device"
SESSION10 = "20261203-083120.720411-0001-D1-bisect"
SESSION12 = "20261203-231300.373927-0001-D1-bisect"
SESSION13 = "20261204-012256.266042-0001-D1-bisect"
SESSION14 = "20261204-035421.632401-0001-D1-bisect"
OLD_END = "a12d7e228046b06faa6e17d7713dc50db8c94d11"
CONFIGURE = ("cmake -S {source} -B {build} -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "
             "-DCMAKE_CUDA_FLAGS=-lineinfo -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_WEBUI=OFF")
BUILD = "ninja -C {build} -j {jobs} test-backend-ops"


def stores(root: Path, *sessions: str) -> RunStore:
    """One run store holding the named sessions' stores, as kvdiag's home on the next machine would."""
    for session in sessions:
        with tarfile.open(FIXTURES / session / "store.tar.gz") as archive:
            archive.extractall(root, filter="data")
    return RunStore(root)


def resume(store: RunStore, run_id: str, entry=None, archs=("sm_90",), configure=CONFIGURE, build=BUILD,
           jobs=None, launcher=None, step=None):
    """What `kvdiag bisect D1 --resume RUN_ID` would take from STORE with the sessions' own commands."""
    entry = entry if entry is not None else load_registry(REPO / "registry").get("D1")
    recipe = BuildRecipe(configure_cmd=configure, build_cmd=build, jobs=jobs, launcher=launcher)
    return load_resumed(store, run_id, entry, recipe, step, Direction.CAUSE, lambda: list(archs))
