"""D13 on a real CMake + ninja build, under each of two ninjas (the system's 1.11, the PyPI wheel's 1.13).

A staged project with llama.cpp's shape (tests/staged_cmake.py: an always-run custom target in front of a library)
is configured with ``CMAKE_MAKE_PROGRAM`` set to the ninja under test and built; kvdiag
prepares its target as `kvdiag run` does (the dry run with the build's own ninja, then the
staleness control with that same ninja) and runs the real D13 entry: not-reproduced with the
control's proof on the fresh build, confirmed after a header edit, and the build table says
what the verdict says. A build whose ``.ninja_log`` another ninja wrote, checked where only
the other ninja is, is "not checked" in both, and its log is left as it was.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry
from kvdiag.store.sweeps import target_summary
from staged_cmake import built_with_ninja

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                                reason="cmake or cc missing")


def d13(kv, build: Path):
    target = kv.target(build, sanitizer=None)
    return target, kv.run(load_registry().get("D13"), target).outcome


def test_a_fresh_build_is_not_reproduced_with_the_controls_proof_then_confirmed_after_a_header_edit(
        kv, ninja, tmp_path):
    src, build = built_with_ninja(ninja.path, tmp_path / "stage")
    target, outcome = d13(kv, build)
    assert target.build.make_program == ninja.path
    assert outcome.verdict is Verdict.NOT_REPRODUCED, outcome.reason
    assert outcome.reason.startswith("the build is current with its sources (ninja: nothing to rebuild against the "
                                     "sources (targets app); ")
    assert (f"the ninja -n control (ninja {ninja.version} ({ninja.path})) called a staged build current right after "
            f"building it and stale after an edit of its header, on this machine") in outcome.reason
    assert target_summary(target.to_dict()).staleness == \
        "current with its sources (ninja -n; its control passed on this machine)"

    time.sleep(0.01)
    (src / "layout.h").write_text("struct task_params { long n; int extra; };\n")
    target, outcome = d13(kv, build)
    assert outcome.verdict is Verdict.CONFIRMED, outcome.reason
    assert any(q.startswith("because: output CMakeFiles/app.dir/main.c.o older than most recent input")
               and "src/layout.h" in q for q in outcome.attempts[0].evidence.quoted)
    assert target_summary(target.to_dict()).staleness.startswith("STALE: ")


@pytest.mark.parametrize("builder", ["system", "wheel"])
def test_a_log_another_ninja_wrote_is_not_checked_and_left_alone(kv, two_ninjas, builder, tmp_path, monkeypatch):
    """The build's own ninja is gone (a build made elsewhere); only the other version is here."""
    made, here = two_ninjas if builder == "system" else reversed(two_ninjas)
    if made.log_version == here.log_version:
        pytest.skip(f"both ninjas write log v{made.log_version}")
    gone = tmp_path / "gone" / "ninja"
    gone.parent.mkdir()
    shutil.copy2(made.path, gone)
    _, build = built_with_ninja(str(gone), tmp_path / "stage")
    shutil.rmtree(gone.parent)
    monkeypatch.setenv("PATH", f"{Path(here.path).parent}{os.pathsep}{os.environ['PATH']}")
    log = (build / ".ninja_log").read_bytes()
    assert log.startswith(f"# ninja log v{made.log_version}\n".encode())

    target, outcome = d13(kv, build)
    assert target.build.make_program is None
    assert target.build.staleness.program == here.path
    why = (f"{build / '.ninja_log'} has log v{made.log_version} and the ninja here ({here.path}) writes log "
           f"v{here.log_version}: a dry run would discard that log (the next build would redo every step), so it "
           f"was not run")
    assert outcome.verdict is Verdict.INCONCLUSIVE
    assert outcome.reason == f"staleness could not be determined: {why}"
    assert target_summary(target.to_dict()).staleness == f"not checked: {why}"
    assert (build / ".ninja_log").read_bytes() == log
