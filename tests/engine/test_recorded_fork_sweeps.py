"""#16 on the H200: the fork's sweeps cold and warm, and D7's build check, as kvdiag recorded them.

The recordings are in tests/fixtures/device/h200-fork-llama-session4 (see its
README.md): BeeLlama fork 775450a68 built as the fork-verdicts issue says.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvdiag.parse.compiler import compiler_errors
from kvdiag.report.schemas import SWEEP_SCHEMA, load_schema
from kvdiag.store.sweeps import load_sweep

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "fixtures" / "device" / "h200-fork-llama-session4"
D7_SIGNATURE = 'error: no instance of function template "flash_attn_ext_f16_process_tile" matches the argument list'
ALL_IDS = [f"D{i}" for i in range(1, 14)]


def unpacked(name: str, tmp_path: Path) -> Path:
    """A recorded .gz file, unpacked where the sweep reader can read it."""
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((DEVICE / name).read_bytes()))
    return out


def text(name: str) -> str:
    path = DEVICE / name
    data = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    return data.decode("utf-8", errors="replace")


@pytest.fixture(params=["cold", "warm"])
def recorded(request, tmp_path):
    return request.param, load_sweep(unpacked(f"sweep-fork-{request.param}.json.gz", tmp_path))


def test_the_sweeps_finish_every_entry_within_the_issue_budgets(recorded):
    kind, sweep = recorded
    assert sweep.ids == ALL_IDS and not sweep.interrupted
    assert {k: n for k, n in sweep.counts().items() if n} == {"confirmed": 6, "not-reproduced": 4, "skipped": 3}
    limit, wall = {"cold": (180.0, 57.039), "warm": (60.0, 11.806)}[kind]
    assert sweep.wall_s == wall and sweep.wall_s <= limit        # #16: cold <= 3 min, warm <= 60 s


def test_the_recorded_sweeps_validate_against_kvdiags_sweep_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(load_schema(SWEEP_SCHEMA))
    for kind in ("cold", "warm"):
        doc = json.loads(unpacked(f"sweep-fork-{kind}.json.gz", tmp_path).read_text())
        assert list(validator.iter_errors(doc)) == [], kind


def test_d7_cold_configures_and_compiles_one_object_and_warm_reuses_it(tmp_path):
    cold = load_sweep(unpacked("sweep-fork-cold.json.gz", tmp_path)).outcome("D7")
    warm = load_sweep(unpacked("sweep-fork-warm.json.gz", tmp_path)).outcome("D7")
    assert (cold.verdict.value, warm.verdict.value) == ("not-reproduced", "not-reproduced")
    assert cold.duration_s == 55.672 and warm.duration_s < 1.0
    assert "fattn-mma-kvarn-instance-ncols1_16-ncols2_8.cu.o clean (configured now)" in cold.reason
    assert warm.reason.startswith("the object(s) were current")
    run = json.loads(text("run-D7-cold.run.json.gz"))
    steps = [(c["argv"][0], c["duration_s"]) for a in run["outcome"]["attempts"] for c in a["commands"]]
    assert steps == [("cmake", 3.827), ("ninja", 0.06), ("ninja", 47.836)]  # configure, -t query, the one object
    assert "D7 NOT-REPRODUCED" in text("buildcheck-D7-warm.log") and "(0.4 s)" in text("buildcheck-D7-warm.log")


def test_d7_on_the_stale_source_quotes_the_compilers_four_error_lines():
    run = json.loads(text("run-D7-stale.run.json.gz"))
    outcome = run["outcome"]
    assert (run["status"], outcome["verdict"], outcome["duration_s"]) == ("finished", "confirmed", 8.146)
    quoted = outcome["attempts"][0]["evidence"]["quoted"]
    errors = compiler_errors("\n".join(quoted))
    assert len(errors) == 4 and all(e.message == D7_SIGNATURE.removeprefix("error: ") for e in errors)
    assert {(Path(e.file).name, e.line) for e in errors} == {("fattn-mma-kvarn-case.cuh", 178)}
    # the same four in the compiler's full log, and in what `kvdiag run D7` printed
    build_errors = compiler_errors(text("D7-stale-compile-build.log"))
    assert [e.raw for e in build_errors] == [line.replace("<fork-stale>", "/tmp/fork-stale") for line in quoted]
    printed = [ln.strip().removeprefix("| ") for ln in text("buildcheck-D7-stale.log").splitlines()
               if D7_SIGNATURE in ln]
    assert len(compiler_errors("\n".join(printed))) == 4
    assert "4 line(s) matched (of 4 compiler error(s))" in text("buildcheck-D7-stale.log")


@pytest.mark.parametrize("kind, seconds", [("cold", "57.0"), ("warm", "11.8")])
def test_the_typescripts_show_progress_while_the_sweep_runs(kind, seconds):
    tty = text(f"sweep-fork-{kind}.tty.gz")
    assert "kvdiag: build checks: on (--skip-builds skips them)" in tty
    done = [int(m) for m in re.findall(r"entries: (\d+)/13", tty)]
    assert done[0] == 0 and max(done) == 13 and done == sorted(done)  # a bar that only moves forward
    assert re.search(r"D1 \[fast\] run 1/1 · 0:\d\d of 120 s", tty)     # the running step, its time and budget
    assert f"13 entries in {seconds} s: 6 confirmed, 4 not-reproduced, 3 skipped" in tty
    if kind == "cold":
        assert re.search(r"D7 \[compile-kvarn-case\] run 1/1 · 0:[1-5]\d of 300 s", tty)


def test_d13_in_the_recorded_sweeps_is_the_always_run_false_positive(tmp_path):
    """Recorded before the fix: the six steps are the UI asset command and what hangs off it.
    Today's check discounts them (tests/workspace/test_staleness_always_run.py stages that shape)."""
    dry_run = [ln.split("] ", 1)[1] for ln in text("D13-staleness-ninja-cold.log").splitlines() if ln.startswith("[")]
    assert dry_run[0] == "Provisioning UI assets" and len(dry_run) == 6
    for kind in ("cold", "warm"):
        d13 = load_sweep(unpacked(f"sweep-fork-{kind}.json.gz", tmp_path)).outcome("D13")
        assert d13.verdict.value == "confirmed"
        assert list(d13.attempts[0].evidence.quoted[1:]) == dry_run[:5]
