"""`kvdiag report ID`: the upstream-ready Markdown of one entry's run, from the run store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from report_fixtures import D2_INSTANTIATION, d2_outcome, d3_flaky_outcome, make_target, simple
from kvdiag import __version__
from kvdiag.cli import Context
from kvdiag import resources
from kvdiag.commands.sweeps import report_cmd
from kvdiag.records.verdict import Verdict
from kvdiag.errors import UsageError
from kvdiag.registry.loader import load_registry
from kvdiag.report.upstream import find_run, reproduce_command, upstream_report
from kvdiag.store.runs import RunStore


@pytest.fixture
def registry_dir(tmp_path: Path) -> Path:
    """A registry of the project's real D2 entry alone."""
    root = tmp_path / "registry"
    root.mkdir()
    shutil.copy(resources.registry_dir() / "D2.md", root / "D2.md")
    return root


@pytest.fixture
def d2(registry_dir: Path):
    return load_registry(registry_dir).get("D2")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    return home


def write_run(home: Path, run_id: str, outcome, *, status: str = "finished", entry: str = "D2", **extra) -> Path:
    store = RunStore(home)
    path = store.root / run_id
    path.mkdir(parents=True)
    from kvdiag.store.runs import RunDir

    RunDir(path).write("run.json", {"kvdiag_version": __version__, "entry": entry, "step": outcome.step,
                                    "status": status, "target": make_target(), "overrides": {},
                                    **({"outcome": outcome.to_dict()} if status == "finished" else {}), **extra})
    return path


def test_report_of_the_d2_run_is_ready_to_paste(d2, home: Path) -> None:
    write_run(home, "20261129-100000-D2-ab12", d2_outcome())
    text = upstream_report(d2, find_run(RunStore(home), d2, "latest"))
    assert text.startswith("# Divergent __syncthreads() in the MMA FlashAttention kernel\n")
    assert "**Verdict: confirmed**" in text
    assert "## What happens\n\nflash_attn_ext_f16_process_tile reaches a block barrier" in text
    assert ("```sh\n/usr/local/cuda/bin/compute-sanitizer --tool synccheck --show-backtrace device --print-limit 100 "
            "--log-file") in text
    assert "-p 'hsk=256,hsv=256,nh=4,nr23=\\[4,1\\],kv=512" in text  # shell-quoted exactly
    assert "compute-sanitizer reported **2048 errors** (`ERROR SUMMARY: 2048 errors`)" in text
    assert "| `fattn-mma-f16.cuh:1538` | barrier-divergence | `flash_attn_ext_f16_process_tile` | 20 | 1 |" in text
    assert f"- `{D2_INSTANTIATION}`" in text
    assert "```\n========= Barrier error detected. Divergent thread(s) in block.\n" in text
    for row in ("| GPU | NVIDIA H200, cc 9.0 (sm\\_90) |", "| driver | 580.159.04 (supports CUDA 13.0) |",
                "| CUDA runtime of kvdiag's GPU probe (cupy or pycuda; not the build's) | 13.0 |", "| compute-sanitizer | 2025.3.1 |", "| nvcc | 13.0.88 |",
                "| commit | d99724f2a0c6b2c4e9f1d3b5a7c9e1f3a5b7c9d1 (v0.9.4-112-gd99724f2) |",
                "| uncommitted changes | no |", "| CUDA flags | -lineinfo |",
                "| -lineinfo | yes (CMAKE\\_CUDA\\_FLAGS: -lineinfo) |",
                "| staleness | current with its sources (ninja -n; its control passed on this machine) |"):
        assert row in text, row
    established = text.split("## What is established\n", 1)[1].split("## What is not established", 1)[0]
    assert "Reproduces on unmodified upstream ggml" in established
    assert "That D2 causes D3" in text.split("## What is not established\n", 1)[1]
    assert "- REPORT: https://github.com/ggml-org/llama.cpp/issues/27678" in text
    assert text.rstrip().endswith("To reproduce with kvdiag: `kvdiag run D2 --build path/to/build`")
    assert (f"Reported with kvdiag {__version__}, registry entry D2, run `20261129-100000-D2-ab12` "
            "(2026-11-29 10:00 UTC)") in text
    assert "h200-box" not in text and "/home/user/ggml/build-li\n" not in text  # no host name, no build folder row


def test_latest_finished_run_is_chosen_and_unfinished_ones_are_skipped(d2, home: Path) -> None:
    write_run(home, "20261128-090000-D2-aaaa", simple("D2", Verdict.NOT_REPRODUCED, "0 errors; control passed"))
    write_run(home, "20261129-100000-D2-bbbb", d2_outcome())
    write_run(home, "20261130-110000-D2-cccc", d2_outcome(), status="running")
    write_run(home, "20261130-120000-D3-dddd", d3_flaky_outcome(), entry="D3")
    assert find_run(RunStore(home), d2, "latest").run_id == "20261129-100000-D2-bbbb"
    assert find_run(RunStore(home), d2, "20261128").run_id == "20261128-090000-D2-aaaa"
    with pytest.raises(UsageError, match="not of D2"):
        find_run(RunStore(home), d2, "20261130-120000-D3")
    with pytest.raises(UsageError, match="did not finish"):
        find_run(RunStore(home), d2, "20261130-110000")


def test_no_run_is_a_usage_error_that_says_what_to_do(d2, home: Path) -> None:
    with pytest.raises(UsageError, match="kvdiag run D2 --build BUILD"):
        find_run(RunStore(home), d2, "latest")


def test_flaky_and_not_reproduced_runs_report_honestly(d2, home: Path) -> None:
    write_run(home, "20261129-100000-D2-ab12", d3_flaky_outcome())
    text = upstream_report(d2, find_run(RunStore(home), d2, "latest"))
    assert "- run 2: confirmed — ggml-abort: fattn.cu:380: fatal error" in text
    assert "No command ran" in text
    nr = simple("D2", Verdict.NOT_REPRODUCED, "1 matching case(s) executed (1 OK, 0 FAIL); the signature did not "
                "match; synccheck's control passed")
    text = upstream_report(d2, {"entry": "D2", "status": "finished", "target": {}, "outcome": nr.to_dict()})
    assert "**Verdict: not-reproduced**" in text and "| GPU | none found |" in text


def test_reproduce_command_keeps_step_and_overrides(d2) -> None:
    assert reproduce_command(d2, {"step": "fast"}) == "kvdiag run D2 --build path/to/build"
    assert reproduce_command(d2, {"step": "numeric", "overrides": {"params": "hsk=64"}}) == \
        "kvdiag run D2 --build path/to/build --step numeric --set params=hsk=64"


def test_report_command_prints_or_writes_the_report(registry_dir: Path, home: Path, tmp_path: Path) -> None:
    write_run(home, "20261129-100000-D2-ab12", d2_outcome())
    runner = CliRunner()
    result = runner.invoke(report_cmd, ["d2"], obj=Context(registry_dir), standalone_mode=False)
    assert result.exception is None, result.output
    assert result.return_value == 0 and result.stdout.startswith("# Divergent __syncthreads()")
    out = tmp_path / "issue.md"
    result = runner.invoke(report_cmd, ["D2", "--run", "latest", "-o", str(out)], obj=Context(registry_dir),
                           standalone_mode=False)
    assert result.return_value == 0 and out.read_text(encoding="utf-8").startswith("# Divergent")


def test_a_run_of_the_launch_probes_program_reports_the_builds_own_command_and_the_radius(d2, home: Path) -> None:
    import dataclasses

    outcome = d2_outcome()
    attempt = outcome.attempts[0]
    argv = list(attempt.commands[0]["argv"])
    probe = "/home/u/.kvdiag/probe-programs/0a1b2c/test-backend-ops"
    own = make_target()["build"]["binaries"].get("test-backend-ops") or "bin/test-backend-ops"
    at = next(i for i, a in enumerate(argv) if str(a).endswith("test-backend-ops"))
    argv[at] = probe
    launched = dataclasses.replace(attempt, commands=({**attempt.commands[0], "argv": argv},))
    write_run(home, "20261203-100000-D2-ab12", dataclasses.replace(outcome, attempts=(launched,)))
    text = upstream_report(d2, find_run(RunStore(home), d2, "latest"))
    assert f"{own} test -o FLASH_ATTN_EXT" in text.split("kvdiag ran it with its launch-probe build")[0]
    assert probe in text.split("kvdiag ran it with its launch-probe build")[1]
    from kvdiag.report.formats.markdown import md_text
    from kvdiag.report.upstream import radius_sentences

    sentence = radius_sentences(d2)[0]
    assert sentence.startswith("Measured blast radius (upstream llama.cpp 749f688fc (whole FLASH_ATTN_EXT hsk space, "
                               "H200) at 749f688fcaa4, 2026-12-02, kvdiag 0.1.1): 1330 of 2932 FLASH_ATTN_EXT cases "
                               "/hsk/ are affected, in 37 kernel instantiation(s): flash_attn_ext_f16<64, 64, 8, 1, "
                               "false, false>")
    assert md_text(sentence) in text
