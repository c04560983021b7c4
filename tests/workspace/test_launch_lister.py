"""kvdiag's CUPTI launch lister: where it finds CUPTI, that it compiles and exports what the driver calls,
and how a run's output says it listed (a run without its ready line is unlisted, never "no launch").

Running it needs a GPU: tests/workspace/test_launch_lister_gpu.py (marker gpu)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvdiag.engine.verdict.launch_program import INJECTION_ENV, LAUNCH_ENV, launch_listed, lister_for, with_lister
from kvdiag.engine.verdict.planning import PlannedStep
from kvdiag.parse.launches import LISTER_READY, confirmed_listing
from kvdiag.registry.entry import Step
from kvdiag.workspace import launch_lister
from kvdiag.workspace.launch_lister import LISTER_DISABLE_ENV, LISTER_NAME, LauncherLibrary, build_lister, cupti_dirs


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def test_cupti_is_found_in_each_toolkit_layout(tmp_path):
    runfile, packaged, targets = tmp_path / "runfile", tmp_path / "packaged", tmp_path / "conda"
    touch(runfile / "extras/CUPTI/include/cupti.h"), touch(runfile / "extras/CUPTI/lib64/libcupti.so.12")
    touch(packaged / "include/cupti.h"), touch(packaged / "lib/libcupti.so")
    touch(targets / "targets/x86_64-linux/include/cupti.h"), touch(targets / "targets/x86_64-linux/lib/libcupti.so.13")
    assert cupti_dirs([runfile]) == (runfile / "extras/CUPTI/include", runfile / "extras/CUPTI/lib64")
    assert cupti_dirs([packaged]) == (packaged / "include", packaged / "lib")
    assert cupti_dirs([targets]) == (targets / "targets/x86_64-linux/include", targets / "targets/x86_64-linux/lib")
    touch(tmp_path / "headers-only/include/cupti.h")
    assert cupti_dirs([tmp_path / "headers-only", tmp_path / "nothing"]) is None


def test_a_wrapper_script_leads_to_the_toolkit_it_execs(tmp_path):
    wrapper = tmp_path / "bin" / "nvcc"
    touch(wrapper).write_text('#!/bin/sh\nexec /opt/cuda-13.9/bin/nvcc "$@"\n')
    assert launch_lister._toolkit_roots(wrapper)[0] == Path("/opt/cuda-13.9")


def test_the_lister_can_be_switched_off_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(LISTER_DISABLE_ENV, "0")
    assert build_lister(tmp_path, log_dir=tmp_path) == LauncherLibrary(None, f"{LISTER_DISABLE_ENV}=0")


@pytest.fixture
def built(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(LISTER_DISABLE_ENV, "1")
    home = tmp_path_factory.mktemp("lister-home")
    logs = tmp_path_factory.mktemp("lister-logs")
    library = build_lister(home, log_dir=logs)
    if library.why_not and ("no nvcc" in library.why_not or "no CUPTI" in library.why_not):
        pytest.skip(library.why_not)
    return library, home, logs


def test_the_lister_compiles_with_this_toolkit_and_exports_the_drivers_entry_point(built):
    library, home, logs = built
    assert library.available, library.why_not
    symbols = launch_lister.exported_symbols(library.path, log_dir=logs)
    if symbols is None:
        pytest.skip("no nm here")
    assert "InitializeInjection" in symbols


def test_the_lister_is_built_once_per_toolkit_and_source(built):
    library, home, logs = built
    compiles = len(list(logs.glob("launch-lister-compile*.cmd.json")))
    again = build_lister(home, log_dir=logs)
    assert again.path == library.path and len(list(logs.glob("launch-lister-compile*.cmd.json"))) == compiles == 1


def test_a_listing_counts_only_where_the_cupti_lister_said_it_was_listing():
    text = "begin\nkvdiag-launch: void k<2>(float*)\nend\n"
    assert confirmed_listing(LISTER_NAME, LISTER_READY + "130001\n" + text) == LISTER_NAME
    assert confirmed_listing(LISTER_NAME, "begin\nend\n") is None      # another tool took the slot: unlisted
    assert confirmed_listing("launch probe", text) == "launch probe"     # compiled in: lists whenever asked
    assert confirmed_listing(True, "") == "launch probe" and confirmed_listing(None, text) is None


def test_a_step_is_listed_by_the_lister_only_where_it_runs_a_cuda_program(tmp_path):
    library = touch(tmp_path / "libkvdiag_launches.so")
    target = SimpleNamespace(launch_lister=lambda: LauncherLibrary(library))
    ops = Step(name="fast", kind="backend-ops", description="d", timeout=60,
               argv=("{{ bin['test-backend-ops'] }}", "test"))
    server = Step(name="server", kind="server", description="d", timeout=60, argv=("{{ bin['llama-server'] }}",))
    build = Step(name="build", kind="command", description="d", timeout=60, argv=("ninja",))
    assert lister_for(ops, target) == library and lister_for(server, target) == library
    assert lister_for(build, target) is None
    assert lister_for(ops, SimpleNamespace(launch_lister=lambda: LauncherLibrary(None, "no nvcc"))) is None
    planned = with_lister(PlannedStep(ops, (("test-backend-ops", "test"),), {"A": "1"}), library)
    assert planned.env == {"A": "1", LAUNCH_ENV: "1", INJECTION_ENV: str(library)}
    assert launch_listed(planned) == LISTER_NAME
    assert launch_listed(SimpleNamespace(env={LAUNCH_ENV: "1"})) == "launch probe"


def test_the_source_is_shipped_as_data():
    from kvdiag.resources import DATA_FOLDERS

    assert "repro/launches" in DATA_FOLDERS and launch_lister.lister_source().is_file()
    assert 'extern "C" int InitializeInjection(void)' in launch_lister.lister_source().read_text()
