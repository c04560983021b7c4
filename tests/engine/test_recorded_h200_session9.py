"""Device session 9 on the H200 (tests/fixtures/device/h200-session9): `kvdiag bisect D1 --first-parent --old
f7832345b --new c9e746733` on the fork, where the old end read from the history did not build."""

from __future__ import annotations

from pathlib import Path

from kvdiag.engine.bisect.bisection import ends_problem
from kvdiag.engine.bisect.step import build_failure_reason, read_steps
from kvdiag.errors import BuildFailed
from kvdiag.records.bisect import SKIP, Direction

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "device" / "h200-session9"
NEW_END = "c9e746733"


class RecordedBuild:
    """The failed build's combined log, as the runner's result gives it back."""

    combined_path = HERE / "f7832345b-build.log"

    def combined_text(self) -> str:
        return self.combined_path.read_text()


def test_the_recorded_old_end_did_not_build_and_is_a_skip_never_a_verdict():
    (old,) = read_steps(HERE / "bisect-steps.json")
    assert old.commit.startswith("f7832345b") and old.role == "old end"
    assert old.verdict == "build-failed" and old.exit == SKIP and old.run_s is None
    assert old.configure_s == 5.578 and old.build_s == 46.97      # 47 s, not a full build of about 450 s


def test_a_failed_build_is_explained_by_the_compilers_first_error_not_ninjas_last_line():
    tail = ("ninja: build stopped: subcommand failed.",)
    failure = BuildFailed("build", RecordedBuild(), "bisect: build failed (exit 1): ninja -C <scratch>/build", tail)
    assert build_failure_reason(failure) == (
        "bisect: build failed (exit 1): ninja -C <scratch>/build: first error: fattn-common.cuh:6: fatal error: "
        "turbo4-tcq-codebook.cuh: No such file or directory")
    no_log = BuildFailed("build", None, "bisect: cannot build: no ninja", tail)
    assert build_failure_reason(no_log) == "bisect: cannot build: no ninja: ninja: build stopped: subcommand failed."


def test_an_old_end_that_did_not_build_is_named_and_the_new_end_left_unjudged():
    (old,) = read_steps(HERE / "bisect-steps.json")
    why = ends_problem(Direction.CAUSE, old, None, unjudged=NEW_END)
    assert f"the old end {old.commit[:12]} was build-failed (bisect: build failed (exit 1)" in why
    assert why.endswith(f"the new end {NEW_END} was not judged (no verdict there could make this range usable): "
                        "nothing was bisected; give another old end")


def test_the_registry_no_longer_bisects_from_a_commit_that_does_not_build():
    text = (Path(__file__).resolve().parents[2] / "registry" / "D1.md").read_text()
    assert "kvdiag bisect D1 --first-parent --old a12d7e228 --new c9e746733" in text
    assert "kvdiag bisect D1 --first-parent --old f7832345b" not in text


# ------------------------------------------------------------------ the overlapped scan, measured

def saved_scan(name: str) -> dict:
    import gzip
    import json

    return json.loads(gzip.decompress((HERE / f"bench-{name}.json.gz").read_bytes()))


def test_the_overlapped_scan_judged_every_case_as_the_sequential_one_did():
    overlapped, one_after = saved_scan("overlap"), saved_scan("nooverlap")
    verdicts = {p: c["verdict"] for p, c in overlapped["cases"].items()}
    assert len(verdicts) == 2932 and verdicts == {p: c["verdict"] for p, c in one_after["cases"].items()}
    assert sum(v == "confirmed" for v in verdicts.values()) == 1330
    assert (overlapped["phases"]["overlap"], one_after["phases"]["overlap"]) == (True, False)


def test_overlapping_gained_nothing_because_the_first_detect_batch_came_when_routing_ended():
    """What docs/performance.md reports: 67.4 s against 67.0 s. The by-kernel batcher waits for a group of
    one kernel set to fill a batch of 128; none did before routing ended, so the detect phase's first batch
    went at the route phase's end (its wall is counted from that batch)."""
    overlapped, one_after = saved_scan("overlap"), saved_scan("nooverlap")
    phases = overlapped["phases"]
    first_batch_at = overlapped["wall_s"] - phases["detect"]["wall_s"]
    assert abs(first_batch_at - phases["route"]["wall_s"]) < 1.0
    assert (phases["route"]["processes"], phases["detect"]["processes"]) == (23, 16)
    assert (one_after["phases"]["route"]["processes"], one_after["phases"]["detect"]["processes"]) == (8, 16)
    assert abs(overlapped["wall_s"] - one_after["wall_s"]) < 0.05 * one_after["wall_s"]


def test_the_slot_pool_not_the_gpu_bounded_the_scans():
    """8 slots (one per 16 GiB, at most 8) while every process of both scans together used at most 5.3 GiB."""
    import gzip

    from kvdiag.proc.slots import slots_for_memory

    import re

    text = gzip.decompress((HERE / "bench-overlap.json.gz").read_bytes()).decode()
    assert set(re.findall(r'"total_memory_bytes": (\d+)', text)) == {"150109880320"}
    assert slots_for_memory(150_109_880_320) == 8
    rows = gzip.decompress((HERE / "bench-gpu.csv.gz").read_bytes()).decode().splitlines()[1:]
    used_mib = [int(row.split(", ")[2].split()[0]) for row in rows if row.count(", ") == 2]
    busy = [int(row.split(", ")[1].split()[0]) for row in rows if row.count(", ") == 2]
    assert len(used_mib) > 150 and max(used_mib) == 5310 and sum(busy) / len(busy) < 10


def test_the_first_error_is_found_in_a_real_build_under_either_ninja(ninja, tmp_path: Path):
    """The recorded log is ninja 1.13's; CI's ninja is 1.11. A real cmake + ninja build of a file whose header
    is gone (the f7832345b failure, in miniature) gives the same reason under both."""
    from kvdiag.workspace.scratch_build import BuildRecipe, build_tree

    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nproject(gone C)\n"
                                           "add_library(gone STATIC ok.c broken.c)\n")
    (source / "ok.c").write_text("int ok(void) { return 1; }\n")
    (source / "broken.c").write_text('#include "removed-codebook.h"\nint broken(void) { return 0; }\n')
    recipe = BuildRecipe(configure_cmd=f"cmake -S {{source}} -B {{build}} -G Ninja -DCMAKE_MAKE_PROGRAM={ninja.path}",
                         build_cmd=f"{ninja.path} -C {{build}} -j {{jobs}}", jobs=1)
    try:
        build_tree(recipe, source, tmp_path / "build", log_dir=tmp_path / "logs", label="bisect")
    except BuildFailed as exc:
        reason = build_failure_reason(exc)
    else:
        raise AssertionError("a source whose header is gone built")
    assert reason.startswith("bisect: build failed (exit 1): ")
    assert reason.endswith(": first error: broken.c:1: fatal error: removed-codebook.h: No such file or directory")
