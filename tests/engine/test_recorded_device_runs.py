"""kvdiag's parsers and judge against the output of its own runs on an H200 (ggml d99724f2).

The recordings are in tests/fixtures/device/h200-ggml-d99724f2 (see its README.md);
device-call1.log holds what kvdiag printed there for each entry, and the verdicts and
reasons judged here from the raw logs must be the same.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from engine_helpers import read_recorded

from kvdiag.cli import main
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.engine.evidence.observe import observe
from kvdiag.engine.scan.cases import CaseSpace, ScanResult
from kvdiag.records.verdict import Attempt, Evidence, Verdict
from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.proc.runner import CommandResult
from kvdiag.registry.loader import load_registry

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "fixtures" / "device" / "h200-ggml-d99724f2"
NO_SANITIZER = "no sanitizer involved: the control is that the matching work executed"
D2_SITE = "fattn-mma-f16.cuh:1538"


@pytest.fixture(scope="module")
def registry():
    return load_registry(REPO / "registry")


def read(name: str) -> str:
    return read_recorded(DEVICE / name)


def recorded_result(tmp_path: Path, stdout: str, stderr: str = "", combined: str | None = None, *,
                    returncode: int | None = 0, signal: int | None = None) -> CommandResult:
    """A CommandResult whose logs are the recorded text, as the runner would have left them."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    paths = {k: logs / f"recorded.{k}.log" for k in ("stdout", "stderr", "combined")}
    paths["stdout"].write_text(stdout)
    paths["stderr"].write_text(stderr)
    paths["combined"].write_text(stdout + stderr if combined is None else combined)
    return CommandResult(argv=("test-backend-ops",), returncode=returncode, signal=signal, timed_out=False,
                         interrupted=False, duration_s=1.0, log_dir=logs, stdout_path=paths["stdout"],
                         stderr_path=paths["stderr"], combined_path=paths["combined"],
                         started_at=datetime(2026, 11, 29, tzinfo=timezone.utc).isoformat())


def judge_recorded(entry, result: CommandResult) -> Attempt:
    step = entry.default_step
    return judge_attempt(entry, observe(step, [result], []), no_sanitizer_gate(step.sanitizer), 1, 1.0)


# ------------------------------------------------------------------ D1, D11: test-backend-ops stdout

def test_d1_stdout_parses_to_257_cases(registry):
    report = parse_backend_ops(read("D1-hsk320.stdout.log.gz"))
    assert len(report.cases) == 257
    assert (report.passed, report.not_supported, report.failed) == (17, 240, 0)
    assert {c.op for c in report.cases} == {"FLASH_ATTN_EXT"}
    assert all(c.params_dict()["hsk"] == "320" for c in report.cases)
    assert report.finished and report.overall_ok is True and report.running_case is None
    cuda = report.backend("CUDA0")
    assert (cuda.tests_passed, cuda.tests_total, cuda.description) == (17, 17, "NVIDIA H200")


def test_d1_recorded_stdout_is_judged_not_reproduced(registry, tmp_path):
    a = judge_recorded(registry.get("D1"), recorded_result(tmp_path, read("D1-hsk320.stdout.log.gz")))
    assert a.verdict is Verdict.NOT_REPRODUCED
    assert a.reason == ("17 matching case(s) executed (17 OK, 0 FAIL); the signature did not match; "
                        + NO_SANITIZER)
    ev = a.evidence
    assert (ev.cases_matched, ev.cases_executed, ev.cases_failed, ev.cases_not_supported) == (257, 17, 0, 240)
    assert ev.aborts == () and ev.running_case is None


def test_d11_stdout_parses_to_16_ok_cases(registry, tmp_path):
    text = read("D11-concat-f16.stdout.log")
    report = parse_backend_ops(text)
    assert [c.status for c in report.cases] == ["OK"] * 16
    assert {c.op for c in report.cases} == {"CONCAT"}
    assert {c.params_dict()["type"] for c in report.cases} == {"f16"}
    assert Counter(c.params_dict()["dim"] for c in report.cases) == {"0": 4, "1": 4, "2": 4, "3": 4}
    assert report.finished and report.overall_ok is True
    a = judge_recorded(registry.get("D11"), recorded_result(tmp_path, text))
    assert a.verdict is Verdict.NOT_REPRODUCED
    assert a.reason == "16 matching case(s) executed (16 OK, 0 FAIL); the signature did not match; " + NO_SANITIZER


def test_d2_single_case_tty_stdout_names_no_case():
    """The process died before the case line was printed (current ggml prints it after the case ran)."""
    report = parse_backend_ops(read("D2-single-case-tty.stdout.log"))
    assert report.cases == () and report.running_case is None and not report.finished
    assert report.backend("CUDA0").description == "NVIDIA H200"


# ------------------------------------------------------------------ D12: the throw probe

_D12_STDOUT_PREFIXES = ("Testing ", "Backend ", "  Skipping", "  Device description", "  Device memory")


def d12_result(tmp_path: Path, combined: str, signal: int) -> CommandResult:
    lines = combined.splitlines(keepends=True)
    stdout = "".join(ln for ln in lines if ln.startswith(_D12_STDOUT_PREFIXES) or not ln.strip())
    stderr = "".join(ln for ln in lines if not (ln.startswith(_D12_STDOUT_PREFIXES) or not ln.strip()))
    return recorded_result(tmp_path, stdout, stderr, combined, returncode=None, signal=signal)


def test_d12_throw_probe_is_judged_not_reproduced(registry, tmp_path):
    entry = registry.get("D12")
    assert entry.default_step.kind == "command"
    a = judge_recorded(entry, d12_result(tmp_path, read("D12-throw-probe.combined.log"), signal=6))
    assert a.verdict is Verdict.NOT_REPRODUCED
    assert a.reason == ("the expected path ran (seen: 'what():  Unable to read test file'; killed by SIGABRT (6)); "
                        "the signature did not match; " + NO_SANITIZER)
    ev = a.evidence
    assert ev.exit == "killed by SIGABRT (6)"
    assert [(x["kind"], x["message"], x["detail"]) for x in ev.aborts] == [
        ("cpp-exception", "terminate called after throwing an instance of 'std::runtime_error'",
         "Unable to read test file")]
    assert ev.unmatched == ("exit(signal='SIGILL'): killed by SIGABRT (6)",)
    assert ev.cases_matched is None   # a command step: no test-backend-ops case accounting


def test_d12_same_output_dying_by_sigill_is_confirmed(registry, tmp_path):
    a = judge_recorded(registry.get("D12"), d12_result(tmp_path, read("D12-throw-probe.combined.log"), signal=4))
    assert a.verdict is Verdict.CONFIRMED


def test_d12_without_the_expected_text_is_inconclusive(registry, tmp_path):
    text = read("D12-throw-probe.combined.log").replace("  what():  Unable to read test file\n", "")
    a = judge_recorded(registry.get("D12"), d12_result(tmp_path, text, signal=6))
    assert a.verdict is Verdict.INCONCLUSIVE
    assert a.reason.startswith("the path did not run as expected")


# ------------------------------------------------------------------ the scan of D2 (hsk=256, -j 8)

@pytest.fixture(scope="module")
def scan_run() -> dict:
    return json.loads(read("scan-D2-run.json"))


def test_recorded_scan_counts(scan_run):
    assert scan_run["entry"] == "D2" and scan_run["kind"] == "scan" and scan_run["status"] == "finished"
    s = scan_run["scan"]
    assert (s["op"], s["params"], s["workers"], s["interrupted"]) == ("FLASH_ATTN_EXT", "hsk=256", 8, False)
    cases = s["cases"]
    assert len(cases) == 132
    assert s["not_supported"] == [] and s["not_run"] == []
    assert s["counts"] == {"confirmed": 60, "not-reproduced": 72, "not-applicable": 0, "skipped": 0,
                           "inconclusive": 0, "error": 0}
    assert Counter(c["verdict"] for c in cases.values()) == {"confirmed": 60, "not-reproduced": 72}
    affected = [c for c in cases.values() if c["verdict"] == "confirmed"]
    assert all(c["error_count"] > 0 and set(c["sites"]) == {D2_SITE} for c in affected)
    assert sum(c["error_count"] for c in affected) == 214816
    assert all(c["error_count"] == 0 and c["sites"] == [] for c in cases.values() if c["verdict"] != "confirmed")
    assert s["sum_case_s"] == pytest.approx(sum(c["duration_s"] for c in cases.values()), abs=0.01)


def test_recorded_scan_instantiations(scan_run):
    s = scan_run["scan"]
    assert len(s["instantiations"]) == 9
    tiles = {k: n for k, n in s["instantiations"].items() if k.startswith("flash_attn_ext_f16_process_tile<")}
    assert sorted(tiles.values()) == [1, 4, 12, 24, 31]
    assert s["instantiations"][
        "flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, (bool)0, (bool)0, (bool)0, "
        "(bool)1>"] == 4
    # the instantiation counts are counts of affected cases
    recount = Counter(i for c in s["cases"].values() if c["verdict"] == "confirmed" for i in c["instantiations"])
    assert recount == s["instantiations"]
    # 12 cases ran two tile instantiations that report the same line
    assert Counter(len(c["sites"]) for c in s["cases"].values() if c["verdict"] == "confirmed") == {1: 48, 2: 12}


def test_recorded_scan_site_row_predates_the_per_case_count(scan_run):
    """The device ran kvdiag before sites were counted once per case: its row says 72 cases
    (one per site entry) for 60 affected cases. The current aggregation over the same
    per-case records says 60."""
    s = scan_run["scan"]
    assert s["sites"] == [{"site": D2_SITE, "kind": "barrier-divergence", "cases": 72, "printed": 6000}]
    results = {}
    for i, (params, c) in enumerate(sorted(s["cases"].items()), start=1):
        sites = tuple({"site": name, "kind": "barrier-divergence", "count": 0} for name in c["sites"])
        ev = Evidence(error_count=c["error_count"], sites=sites, instantiations=tuple(c["instantiations"]))
        results[params] = Attempt("fast", i, Verdict(c["verdict"]), c["reason"], ev, duration_s=c["duration_s"])
    space = CaseSpace(s["op"], s["params"], tuple(s["cases"]), ())
    again = ScanResult("D2", space, s["workers"], results)
    assert list(again.sites().values()) == [
        {"site": D2_SITE, "kind": "barrier-divergence", "cases": 60, "printed": 0, "errors": 214816}]
    assert again.instantiations() == s["instantiations"]
    assert again.to_dict()["counts"] == s["counts"]


# ------------------------------------------------------------------ the two sweeps, before and after the fix

def test_compare_recorded_sweeps(isolated, capsys):
    rc = main(["compare", str(DEVICE / "sweep-base.json"), str(DEVICE / "sweep-fixed.json")])
    out = capsys.readouterr().out
    assert rc == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("D")}
    assert len(rows) == 13
    assert rows["D2"][:4] == ["D2", "fixed", "confirmed", "not-reproduced"]
    assert "sanitizer errors 2048 → 0" in next(line for line in out.splitlines() if line.startswith("D2 "))
    assert sorted(r[0] for r in rows.values() if r[1] == "unchanged") == sorted(set(rows) - {"D2"})
    assert out.rstrip().splitlines()[-1] == "1 fixed, 12 unchanged"


def test_compare_recorded_sweeps_json(isolated, capsys):
    rc = main(["compare", str(DEVICE / "sweep-base.json"), str(DEVICE / "sweep-fixed.json"), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["counts"] == {"regression": 0, "fixed": 1, "applicability": 0, "changed": 0, "unchanged": 12,
                              "only-in-a": 0, "only-in-b": 0}
    d2 = next(e for e in data["entries"] if e["entry"] == "D2")
    assert (d2["before"], d2["after"], d2["errors_before"], d2["errors_after"]) == (
        "confirmed", "not-reproduced", 2048, 0)
    assert data["before"]["commit"] == data["after"]["commit"] and data["after"]["dirty"] is True


def test_compare_the_other_way_round_is_a_regression(isolated, capsys):
    rc = main(["compare", str(DEVICE / "sweep-fixed.json"), str(DEVICE / "sweep-base.json")])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.rstrip().splitlines()[-1] == "1 regression, 12 unchanged"
