"""Device session 28 on an H100 (tests/fixtures/device/h100-session28): racecheck and synccheck discovery of one
subset under MPS with 16 processes, on 16 cores and on 8, and a real MPS daemon's control socket.

Half the cores made the same discovery 1.44 times slower, not 2, and its processes used 23 % less CPU: the host
binds in part, and part of its busy time was threads spinning while they wait. The MPS probe of kvdiag missed the
running daemon (its control socket is a sequenced-packet one); recorded logs are judged again with the engine.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

from kvdiag.engine.discover.batch import Unit, judge_process, split_cases
from kvdiag.engine.discover.result import from_document
from kvdiag.parse.text import strip_ansi
from kvdiag.proc.mps import CONTROL_SOCKET_TYPE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz  # noqa: E402
from sampled_load import arm_span, busy_cores, chain_stamps, gpu_samples  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session28"
ARMS = ("mps-j16", "mps-j16-cores8")


def saved(arm: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"discover-{arm}.json.gz"))


def bench(arm: str) -> dict:
    return json.loads((FIXTURE / f"bench-{arm}.json").read_text())["discover"]


def test_one_h100_its_settings_untouched_and_the_tree_built_from_a_tarball():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, Default" in env and "2025.3.1" in env
    assert (FIXTURE / "compute-mode.txt").read_text().splitlines() == ["NVIDIA H100 80GB HBM3, Default"] * 2
    at = chain_stamps(FIXTURE)
    assert at["ggml built rc=0"] - at["extracted rc=0"] == 245
    assert "[176/176] Linking CXX executable bin/test-backend-ops" in (FIXTURE / "builds.txt").read_text()
    assert "built in 28.8 s" in (FIXTURE / "warmup.txt").read_text()


def test_both_arms_judged_the_same_cases_every_one_and_found_the_same_root():
    for arm in ARMS:
        doc = saved(arm)
        assert doc["totals"]["all"] == {"clean": 6058, "findings": 189, "aborted": 0, "not-supported": 0,
                                        "spared": 3475, "cut": 0}
        assert (doc["workers"], len(doc["processes"]), doc["interrupted"]) == (16, 198, False)
        assert doc["occupancy"]["most"] == 16 and doc["occupancy"]["below_pool_s"] < 5
        result = from_document(doc)
        assert [(r.key.tool, r.key.site, r.cases) for r in result.defects] == [
            ("synccheck", "src/ggml-cuda/fattn-mma-f16.cuh:1538", 160)]
        assert doc["order"].startswith("this machine's discoveries 20261207-153316.874742-0001-discover, then ")
        assert doc["mps"] is None                         # the probe's fault, though every process was a client


def test_the_only_differences_are_which_instantiations_of_the_function_reported_at_the_same_barrier():
    def states(doc):
        return {(c["tool"], c["op"], c["params"]): c for c in doc["cases"]}
    a, b = states(saved("mps-j16")), states(saved("mps-j16-cores8"))
    assert a.keys() == b.keys() and len(a) == 9722
    kernels = {k: ({f["kernel"] for f in a[k]["findings"]}, {f["kernel"] for f in b[k]["findings"]}) for k in a}
    differ = {k for k in a if a[k]["state"] != b[k]["state"] or kernels[k][0] != kernels[k][1]}
    assert len(differ) == 32 and {(k[0], k[1]) for k in differ} == {("synccheck", "FLASH_ATTN_EXT")}
    for k in differ:
        assert a[k]["state"] == b[k]["state"] == "findings"
        assert {f["line"] for f in a[k]["findings"] + b[k]["findings"]} == {1538}
        assert {f["function"] for f in a[k]["findings"] + b[k]["findings"]} == {"flash_attn_ext_f16_process_tile"}
    # Which of the kernel's instantiations (its fixup variants) reported depends on the schedule, either way.
    assert sum(kernels[k][0] < kernels[k][1] for k in differ) == 19
    assert sum(kernels[k][1] < kernels[k][0] for k in differ) == 12


def test_half_the_cores_took_1_44_times_the_wall_and_23_percent_less_cpu():
    wide, narrow = bench("mps-j16"), bench("mps-j16-cores8")
    assert (wide["discover_wall_s"], narrow["discover_wall_s"]) == (196.743, 282.873)
    assert round(narrow["discover_wall_s"] / wide["discover_wall_s"], 2) == 1.44     # 2 if the host bound, 1 if not
    assert (wide["cpu_s"], narrow["cpu_s"]) == (2869.7, 2216.5)
    assert round(1 - narrow["cpu_s"] / wide["cpu_s"], 2) == 0.23
    assert round(busy_cores(FIXTURE, *arm_span(FIXTURE, "mps-j16")), 2) == 14.12
    assert round(busy_cores(FIXTURE, *arm_span(FIXTURE, "mps-j16-cores8")), 2) == 7.76
    for arm, busy in (("mps-j16", 75.1), ("mps-j16-cores8", 78.3)):
        memory, used = gpu_samples(FIXTURE, *arm_span(FIXTURE, arm))
        assert round(sum(used) / len(used), 1) == busy and max(memory) < 7000


def test_every_op_but_im2col_3d_slowed_alike():
    def per_op(doc):
        out: dict[str, float] = {}
        for row in doc["processes"]:
            out[row["op"]] = out.get(row["op"], 0.0) + row["wall_s"]
        return out
    wide, narrow = per_op(saved("mps-j16")), per_op(saved("mps-j16-cores8"))
    ratios = {op: round(narrow[op] / wide[op], 2) for op in wide}
    assert all(1.44 <= ratios[op] <= 1.47 for op in ("CONV_2D", "FLASH_ATTN_EXT", "MUL_MAT", "ROPE"))
    assert ratios["IM2COL_3D"] == 1.09


def test_a_recorded_process_is_judged_again_as_the_device_judged_it():
    record = json.loads(read_gz(FIXTURE / "logs" / "synccheck-00001.cmd.json.gz"))
    argv, result = record["argv"], record["result"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    unit = Unit("synccheck", argv[argv.index("-o") + 1], cases)
    text = strip_ansi(read_gz(FIXTURE / "logs" / "synccheck-00001.stdout.log.gz"))
    errors = strip_ansi(read_gz(FIXTURE / "logs" / "synccheck-00001.stderr.log.gz"))
    outcome = judge_process(unit, split_cases(text, "synccheck"), text, name="synccheck-00001", log="synccheck-00001",
                            wall_s=result["duration_s"], timed_out=result["timed_out"], ended=result["description"],
                            budget_s=600.0, errors=errors, listed=True)
    device = {c["params"]: c["state"] for c in saved("mps-j16-cores8")["cases"]
              if c["tool"] == "synccheck" and (c.get("log") or "").endswith("synccheck-00001.stdout.log")}
    assert len(device) == 32 and {r.params: r.state for r in outcome.records} == device
    assert {f.line for r in outcome.records for f in r.findings} == {1538}


def test_the_daemon_served_every_process_and_saw_no_fatal_error():
    control = gzip.open(FIXTURE / "mps" / "control.log.gz", "rt").read()
    server = gzip.open(FIXTURE / "mps" / "server.log.gz", "rt").read()
    assert len(set(re.findall(r"NEW CLIENT (\d+)", control))) == 413
    assert server.count("is associated") == 420 and "fatal" not in server.lower()
    assert control.rstrip().endswith("Exit with status 0")


def test_a_real_daemons_control_socket_takes_sequenced_packets_only_which_the_probe_now_uses():
    check = (FIXTURE / "mps-pipe-check.txt").read_text()
    listing = check.split("$ echo quit")[0]
    assert "srw-rw-rw- 1 root root    0 Dec  7 15:42 control\n" in listing
    tried = re.findall(r"^ connect (ok|fail) (\d)", check, re.M)
    assert tried == [("fail", "1"), ("ok", "5"), ("fail", "2")] * 2          # stream, seqpacket, datagram
    assert "probe None" in check and (FIXTURE / "mps-probe.txt").read_text().split() == ["None", "None"]
    assert int(CONTROL_SOCKET_TYPE) == 5
    after = check.split("$ echo quit")[1].split("$ tail")[0]
    assert " control\n" in after and "nvidia-cuda-mps-control.pid" not in after   # the socket file stays
