"""A sanitized step's launches, listed without the sanitizer by kvdiag's CUPTI lister (engine.verdict.launch_program),
and a scan's sanitized cases named by their route phase (engine.scan.phases.with_route_launches).

The recorded H100 output (tests/fixtures/device/h100-launch-lister/) is the ground truth: the lister
lists runtime and driver launches inside their cases, and under compute-sanitizer it cannot subscribe
and prints nothing. The scenario below stands in for a CUDA program under the lister: it prints the
recorded output when CUDA_INJECTION64_PATH is set, as the real program did on the H100.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvdiag.engine.verdict.launch_program import INJECTION_ENV
from kvdiag.engine.verdict.launch_program import listed_without_sanitizer
from kvdiag.engine.evidence.observe import Observations
from kvdiag.engine.verdict.planning import PlannedStep
from kvdiag.engine.scan.phases import with_route_launches
from kvdiag.parse.launches import LISTER_READY, confirmed_listing, parse_launches
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.registry.entry import Step
from kvdiag.workspace.launch_lister import LISTER_NAME, LauncherLibrary

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-launch-lister"
KERNELS = ["scale_by<2>", "scale_by<3>", "add_one"]


def test_the_recorded_listing_names_every_launch_and_the_sanitized_runs_list_nothing():
    for build in ("static", "shared"):
        text = (RECORDED / f"cudart-{build}.stdout.txt").read_text()
        assert confirmed_listing(LISTER_NAME, text) == LISTER_NAME
        assert [launch.kernel for launch in parse_launches(text)] == KERNELS
    for tool in ("memcheck", "synccheck"):
        text = (RECORDED / f"{tool}.combined.txt").read_text()
        assert "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" in text
        assert confirmed_listing(LISTER_NAME, text) is None and parse_launches(text) == ()


def scenario(tmp_path: Path, recorded: str) -> Path:
    """Prints ``recorded`` under the lister (CUDA_INJECTION64_PATH set), only the case lines without it."""
    script = tmp_path / "prints_what_the_lister_printed.py"
    script.write_text("import os, sys\n"
                      f"text = open({str(RECORDED / recorded)!r}).read()\n"
                      f"if not os.environ.get({INJECTION_ENV!r}):\n"
                      "    text = ''.join(l for l in text.splitlines(True) if not l.startswith('kvdiag-launch'))\n"
                      "sys.stdout.write(text)\n")
    return script


def observed(step: Step, **fields) -> Observations:
    return Observations(step=step, results=(), stdout="", stderr="", combined="", sanitizer_text="", sanitizer=None,
                        backend_ops=None, aborts=(), **fields)


@pytest.fixture
def sanitized():
    return Step(name="fast", kind="backend-ops", description="d", timeout=60, sanitizer="synccheck",
                argv=("{{ bin['test-backend-ops'] }}", "test"))


def lister_target(tmp_path: Path):
    from types import SimpleNamespace

    library = tmp_path / "libkvdiag_launches.so"
    library.write_text("")
    return SimpleNamespace(launch_lister=lambda: LauncherLibrary(library))


def test_a_sanitized_step_is_listed_by_a_bare_run_of_its_commands(tmp_path, sanitized):
    planned = PlannedStep(sanitized, ((sys.executable, str(scenario(tmp_path, "cudart-shared.stdout.txt"))),))
    obs = listed_without_sanitizer(observed(sanitized), planned, lister_target(tmp_path), tmp_path, "fast-1", 60.0)
    assert [launch.kernel for launch in obs.launches] == KERNELS and obs.launch_listed
    assert obs.launch_lister == "CUPTI injection (the same commands run without synccheck)"
    assert (tmp_path / "fast-1-launches-1.cmd.json").is_file()


def test_a_bare_run_without_the_ready_line_lists_nothing(tmp_path, sanitized):
    planned = PlannedStep(sanitized, ((sys.executable, str(scenario(tmp_path, "memcheck.combined.txt"))),))
    before = observed(sanitized)
    assert listed_without_sanitizer(before, planned, lister_target(tmp_path), tmp_path, "fast-1", 60.0) is before


def test_nothing_runs_where_the_run_listed_itself_or_no_lister_exists(tmp_path, sanitized):
    planned = PlannedStep(sanitized, ((sys.executable, "-c", "raise SystemExit(3)"),))
    listed = observed(sanitized, launch_listed=True, launch_lister="launch probe")
    assert listed_without_sanitizer(listed, planned, lister_target(tmp_path), tmp_path, "a", 60.0) is listed
    bare = observed(sanitized)
    from types import SimpleNamespace

    none = SimpleNamespace(launch_lister=lambda: LauncherLibrary(None, "no nvcc"))
    assert listed_without_sanitizer(bare, planned, none, tmp_path, "b", 60.0) is bare
    assert list(tmp_path.glob("*.cmd.json")) == []


def test_a_scans_sanitized_case_is_named_by_its_route_phase():
    unlisted = Attempt(step="fast", index=1, verdict=Verdict.CONFIRMED, reason="r", evidence=Evidence())
    probed = Attempt(step="fast", index=1, verdict=Verdict.NOT_REPRODUCED, reason="r",
                     evidence=Evidence(launched=("k<1>",), launch_listing="launch probe"))
    out = with_route_launches({"a": unlisted, "b": probed, "c": unlisted}, {"a": ("scale_by<2>",), "b": ("k<2>",)},
                              LISTER_NAME)
    assert out["a"].evidence.launched == ("scale_by<2>",)
    assert out["a"].evidence.launch_listing == "CUPTI injection (route phase, without the sanitizer)"
    assert out["b"] is probed and out["c"] is unlisted



def test_the_lister_saying_it_is_not_listing_is_not_its_ready_line():
    refused = "kvdiag-launch-lister: not listing: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED\n"
    assert confirmed_listing(LISTER_NAME, refused) is None
    assert confirmed_listing(LISTER_NAME, refused + LISTER_READY + "130001\n") == LISTER_NAME


def test_a_run_of_a_sanitized_step_names_the_instantiation_its_bare_run_listed(kv):
    """`kvdiag run` on a build whose test-backend-ops the probe does not fit: the sanitized run lists
    nothing (CUPTI refused beside the sanitizer), its bare run under the lister names the kernel, and
    the confirmed verdict carries it, saying which lister and how."""
    import dataclasses

    from engine_helpers import d2_like

    build = kv.build("backend_ops_case_space")
    target = kv.target(build, sanitizer=kv.sanitizer())
    library = kv.root / "libkvdiag_launches.so"
    library.write_text("")
    listed = dataclasses.replace(target, probe_program=None, launch_lister=lambda: LauncherLibrary(library))
    result = kv.run(kv.entry("D931", d2_like()), listed)
    assert result.outcome.verdict is Verdict.CONFIRMED
    assert result.evidence.launch_listing == "CUPTI injection (the same commands run without synccheck)"
    assert result.evidence.launched == ("flash_attn_ext_f16<256, 256, 4, 4, false, false>",)
    assert "fast-1-launches-1.cmd.json" in result.log_names()
    unlisted = kv.run(kv.entry("D932", d2_like()), dataclasses.replace(target, probe_program=None))
    assert unlisted.evidence.launch_listing is None and not unlisted.evidence.launched
