"""D3, D2's server route, D9 and D5 re-judged on kvdiag's own server logs from the H200 (issue #17).

The logs are in tests/fixtures/device/h200-fork-llama-session4 (README there): the fork
775450a68 and upstream llama.cpp 749f688fc, each with the synthesized qwen35 MTP model
or the head-dim-256 llama model. Nothing runs: each log is handed to the judge as the
server's output, as the engine does after a run.
"""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from kvdiag.engine.verdict.judge import Gate, judge_attempt
from kvdiag.engine.evidence.observe import observe
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

from test_registry_verdicts import Printed  # tests/registry is on sys.path (rootdir-less test modules)

RECORDED = Path(__file__).parents[1] / "fixtures" / "device" / "h200-fork-llama-session4"
# The expect pattern D3 had before the H200 run (commit b7c95b0 dropped it): no CUDA<n> KV buffer.
NO_DEVICE_KV_BUFFER = r'\A(?!(?s:.*)\bCUDA\d+ +KV buffer size = )'
HOST_KV_4096 = "CPU KV buffer size =     4.25 MiB"
ACCEPTED = "draft acceptance = 0.78040 (  629 accepted /   806 generated)"


@pytest.fixture(scope="module")
def entries():
    return {e.id: e for e in load_registry().entries}


def recorded(name: str) -> str:
    path = RECORDED / name
    data = path.read_bytes()
    return (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8", "replace")


def judged(entry, log: str, *, step=None, returncode: int = 0, sanitizer_logs=()):
    chosen = step or entry.default_step
    obs = observe(chosen, [Printed(stderr=log, returncode=returncode)], list(sanitizer_logs))
    return judge_attempt(entry, obs, Gate(True, "control passed (test)"), 1, 0.0)


# --------------------------------------------------------------------------- D3

def test_d3_fork_log_is_not_reproduced_with_host_kv_and_accepted_drafts_quoted(entries):
    """The fork's run from call 3 (inconclusive then), judged by the current entry."""
    log = recorded("D3-fork-server-mtp-1.combined.log.gz")
    attempt = judged(entries["D3"], log)
    assert attempt.verdict is Verdict.NOT_REPRODUCED
    assert HOST_KV_4096 in attempt.reason and ACCEPTED in attempt.reason
    # the device-side line that made call 3 inconclusive is in the same log: the q8_0 store stage
    # of the one host-resident attention layer (registry/D3.md, "What a clean run must show")
    assert "CUDA0 KV buffer size =     0.53 MiB" in log
    assert "canonical accelerator KV store staging: 1 host-resident layer(s), 512 rows, 0.53 MiB" in log


def test_d3_fork_log_was_inconclusive_under_the_old_no_device_buffer_rule(entries):
    """Guards the rule: the same log is inconclusive when the entry again demands no CUDA<n> KV buffer."""
    entry = entries["D3"]
    assert NO_DEVICE_KV_BUFFER not in entry.default_step.expect
    old_step = replace(entry.default_step, expect=entry.default_step.expect + (NO_DEVICE_KV_BUFFER,))
    attempt = judged(entry, recorded("D3-fork-server-mtp-1.combined.log.gz"), step=old_step)
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert "the path did not run as expected" in attempt.reason and "CUDA" in attempt.reason


def test_d3_fork_log_without_accepted_drafts_stays_inconclusive(entries):
    log = recorded("D3-fork-server-mtp-1.combined.log.gz")
    none_accepted = log.replace("  629 accepted", "    0 accepted")
    assert judged(entries["D3"], none_accepted).verdict is Verdict.INCONCLUSIVE
    no_draft_line = "".join(line for line in log.splitlines(keepends=True) if "draft acceptance" not in line)
    assert judged(entries["D3"], no_draft_line).verdict is Verdict.INCONCLUSIVE


def test_d3_fork_log_without_a_host_kv_buffer_stays_inconclusive(entries):
    """Every KV buffer on the device (target and MTP context): nothing says the cache was on the host."""
    log = recorded("D3-fork-server-mtp-1.combined.log.gz")
    log = log.replace("       CPU KV buffer size", "     CUDA0 KV buffer size")
    assert "CPU KV buffer" not in log
    assert judged(entries["D3"], log).verdict is Verdict.INCONCLUSIVE


def test_d3_upstream_log_is_not_reproduced_with_only_a_host_kv_buffer(entries):
    log = recorded("D3-upstream-server-mtp-1.combined.log.gz")
    attempt = judged(entries["D3"], log)
    assert attempt.verdict is Verdict.NOT_REPRODUCED
    assert HOST_KV_4096 in attempt.reason and ACCEPTED in attempt.reason
    assert "CUDA0 KV buffer" not in log and "store staging" not in log     # upstream has no store stage


# --------------------------------------------------------------------------- D2 server route, D9, D5

@pytest.mark.parametrize("tree, line", [("fork", 1607), ("upstream", 1538)])
def test_d2_server_route_is_confirmed_on_both_trees(entries, tmp_path, tree, line):
    sanitizer_log = tmp_path / "server-1.sanitizer.log"
    sanitizer_log.write_text(recorded(f"D2-server-{tree}-server-1.sanitizer.log.gz"))
    entry = entries["D2"]
    attempt = judged(entry, recorded(f"D2-server-{tree}-server-1.combined.log"), step=entry.step("server"),
                     returncode=99, sanitizer_logs=[sanitizer_log])
    assert attempt.verdict is Verdict.CONFIRMED
    assert attempt.evidence.error_count == 256
    assert {site["line"] for site in attempt.evidence.sites} == {line}


def test_d9_fork_refusal_is_confirmed(entries):
    attempt = judged(entries["D9"], recorded("D9-fork-device-kv-1.combined.log"), returncode=1)
    assert attempt.verdict is Verdict.CONFIRMED
    assert any("KVarN requires a backend with KVarN store and materialization support" in q
               for q in attempt.evidence.quoted)


def test_d5_recorded_kvarn5_log_ran_at_verbosity_3_which_hides_libllama_info_lines(entries):
    """Why call 3 was inconclusive: the server ran at its default verbosity 3, and the KVarN line and
    the compute buffer sizes are libllama INFO lines, shown from -lv 4 on; the entry now passes -lv 4."""
    log = recorded("D5-fork-kvarn5-1.combined.log")
    assert "verbosity = 3" in log.splitlines()[0]
    assert "compute buffer size" not in log and "KVarN" not in log and "cannot enable" not in log
    assert judged(entries["D5"], log).verdict is Verdict.INCONCLUSIVE
    for step in entries["D5"].steps:
        assert step.argv[step.argv.index("-lv") + 1] == "4", step.name


def test_d5_q8_0_arm_runs_as_the_comparison_of_kvarn5_and_alone_is_a_usage_error_naming_it(entries):
    """Call 3's `kvdiag run D5 --step q8_0-control` ended in exit 64 with nothing run; the arm now runs
    with `kvdiag run D5` and quotes the seed's kind of figure."""
    import re

    from kvdiag.engine.verdict.plan import pick_step
    from kvdiag.errors import UsageError

    entry = entries["D5"]
    assert entry.default_step.name == "kvarn5" and entry.default_step.compare_with == "q8_0-control"
    arm = entry.step("q8_0-control")
    assert all(re.search(p, "llama_context:  CUDA_Host compute buffer size =    20.28 MiB") for p in arm.expect)
    names_kvarn5 = r"comparison arm of step 'kvarn5' and runs with it \(kvdiag run D5 --step kvarn5\)"
    with pytest.raises(UsageError, match=names_kvarn5):
        pick_step(entry, "q8_0-control")
