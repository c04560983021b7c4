"""Device session 21 on an H100 (tests/fixtures/device/h100-session21): D18 confirmed on the tree discovery
found it on and its fix probe verified there; the whole suite under memcheck and initcheck; and a drafted
initcheck root that came out inconclusive on the build that found it, which the drafts now avoid.

Recorded on ggml d99724f2 built there: `kvdiag run D18`, `kvdiag verify D18 --probe D18-fix-combine-barrier`
twice (the second with `--numeric-params`), the whole suite under memcheck and initcheck stopped at 420 s,
GET_ROWS under initcheck with `--draft-into`, the draft's `kvdiag run`, and its smallest case by hand in
test mode with and without the host API's checks. Recorded logs are judged again with the engine.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from kvdiag.controls.gate import Gate
from kvdiag.engine.discover.batch import Unit, judge_process
from kvdiag.engine.discover.draft import DraftContext, render_draft, sanitizer_options
from kvdiag.engine.evidence.observe import observe
from kvdiag.engine.verdict.judge import judge_attempt
from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.sanitizer import HOST_API_KIND, parse_sanitizer, site_label
from kvdiag.parse.text import strip_ansi
from kvdiag.records.verdict import Verdict
from kvdiag.registry.lint import lint_raw
from kvdiag.registry.loader import load_registry
from kvdiag.registry.raw import FRONT_MATTER, RawEntry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import recorded_command  # noqa: E402
from test_recorded_h100_session18_discover import read_gz, recorded  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session21"
REGISTRY = Path(__file__).resolve().parents[2] / "registry"
RUNS = FIXTURE / "runs"
D18_RUN, D18_AFTER = "20261207-004352.842265-0002-D18", "20261207-005832.377957-0005-D18"
WHOLE_LOGS = ["initcheck-00218", "initcheck-00348", "initcheck-00370", "initcheck-00482", "initcheck-00486",
              "initcheck-00576", "initcheck-00692"]
GET_ROWS_I32 = "type=i32,n=256,m=5,r=4,be1=1,be2=1,v=0"


def document(name: str) -> dict:
    return json.loads(read_gz(FIXTURE / f"{name}.json.gz"))


def chain() -> dict[str, int]:
    return {line.split()[2]: int(line.split()[0]) for line in (FIXTURE / "chain.txt").read_text().splitlines()}


def rejudge_unlisted(process: str, fixture: Path = FIXTURE) -> tuple[Unit, list]:
    """One recorded memcheck or initcheck process judged again: those tools run every case, so the
    processes printed no launch listing (only routed racecheck and synccheck processes do)."""
    record = json.loads(read_gz(fixture / "logs" / "whole" / f"{process}.cmd.json.gz"))
    argv, result = record["argv"], record["result"]
    assert "KVDIAG_PRINT_LAUNCHES" not in record["env_overrides"]
    body = argv[argv.index("-p") + 1][2:-2]
    cases = tuple(re.sub(r"\\(.)", r"\1", alt) for alt in re.split(r"(?<!\\)\|", body))
    tool = argv[argv.index("--tool") + 1]
    unit = Unit(tool, argv[argv.index("-o") + 1], cases)
    text = strip_ansi(read_gz(fixture / "logs" / "whole" / f"{process}.stdout.log.gz"))
    outcome = judge_process(unit, split_cases(text, tool), text, name=process, log=process,
                            wall_s=result["duration_s"], timed_out=result["timed_out"], ended=result["description"],
                            budget_s=600.0, listed=False)
    assert not outcome.again and len(outcome.records) == len(cases)
    return unit, outcome.records


def test_the_machine_is_one_h100_and_the_build_took_195_s():
    env = (FIXTURE / "env.txt").read_text()
    assert "NVIDIA H100 80GB HBM3" in env and "2025.3.1" in env and "cores 16" in env
    assert chain()["built"] - chain()["build"] == 195


# ------------------------------------------------------------------ D18: confirmed, and its fix verified

def recorded_attempt(entry_id: str, run_id: str, runs: Path = RUNS, control: str = "racecheck control passed"):
    """A recorded run's log judged again with the registry's entry, as a launch-listed attempt."""
    logs = runs / run_id / "logs"
    combined = logs / "recorded.combined.log"
    combined.write_text((logs / "fast-1.stdout.log").read_text() + (logs / "fast-1.stderr.log").read_text())
    entry = load_registry(REGISTRY).get(entry_id)
    try:
        obs = observe(entry.default_step, [recorded_command(logs, "fast-1", combined)],
                      [logs / "fast-1.sanitizer.log"], launch_listed=True)
        return judge_attempt(entry, obs, Gate(True, control), 1, 1.0)
    finally:
        combined.unlink()


def test_d18_is_confirmed_again_from_its_recorded_log_quoting_the_fp16_site():
    attempt = recorded_attempt("D18", D18_RUN)
    assert attempt.verdict is Verdict.CONFIRMED
    assert any("cuda_fp16.h:5122" in line for line in attempt.evidence.quoted)
    assert "flash_attn_ext_f16<192, 128, 8, 8, false, false>" in (FIXTURE / "d18-run.txt").read_text()


def test_the_fixed_builds_log_holds_no_race_record_and_the_same_kernel_ran():
    log = (RUNS / D18_AFTER / "logs" / "fast-1.sanitizer.log").read_text()
    report = parse_sanitizer(log, "racecheck")
    assert report.findings == () and report.racecheck.errors == 0 and report.racecheck.warnings == 0
    run = json.loads((RUNS / D18_AFTER / "run.json").read_text())["outcome"]
    assert run["verdict"] == "not-reproduced"
    assert "flash_attn_ext_f16<192, 128, 8, 8, false, false>" in run["attempts"][0]["evidence"]["launched"]


def test_verify_called_the_fix_verified_only_once_the_numeric_test_ran():
    first = (FIXTURE / "d18-verify.txt").read_text()
    assert "conclusion: inconclusive" in first and "no numeric step (give --numeric-params)" in first
    second = (FIXTURE / "d18-verify2.txt").read_text()
    assert "conclusion: fix verified" in second
    assert re.search(r"numeric /hsk=192,hsv=128/\s+33 OK / 0 FAIL\s+33 OK / 0 FAIL", second)
    assert "source tree: untouched" in second and "build                          -" in second


def test_d18_names_its_device_pair():
    text = (REGISTRY / "D18.md").read_text()
    assert "h100-session21" in text and "fix verified" in text


# ------------------------------------------------------------------ the whole suite under memcheck and initcheck

def test_the_whole_suite_under_memcheck_and_initcheck_judged_93_percent_in_411_s():
    doc = document("whole")
    assert doc["tools"] == ["memcheck", "initcheck"] and doc["workers"] == 9 and doc["interrupted"] is True
    assert round(doc["wall_s"]) == 411 and len(doc["processes"]) == 720
    totals = doc["totals"]
    assert totals["judged"] == 22196 and totals["cut"] == 1688 and totals["judged"] + totals["cut"] == 23884
    assert totals["by_tool"]["memcheck"]["findings"] == 0 and totals["by_tool"]["initcheck"]["findings"] == 52
    assert round(sum(p["wall_s"] or 0 for p in doc["processes"])) == 3685


def test_every_cut_case_says_it_was_stopped_by_the_deadline_none_dropped():
    doc = document("whole")
    cut = [c for c in doc["cases"] if c["state"] == "cut"]
    assert len(cut) == 1688 and len(doc["cases"]) == 23884
    whys = Counter("not run" if c["why"].startswith("not run") else "interrupted" for c in cut)
    assert whys == {"not run": 1460, "interrupted": 228}
    assert all(c["why"].startswith(("not run: the discovery was interrupted", "interrupted (Ctrl-C)")) for c in cut)


def test_neither_the_cores_nor_the_gpu_were_full():
    rows = [line.split() for line in read_gz(FIXTURE / "cpu.log.gz").splitlines()]
    first, last = [int(v) for v in rows[0][2:]], [int(v) for v in rows[-1][2:]]
    idle = (last[3] + last[4]) - (first[3] + first[4])
    busy = 16 * (1 - idle / (sum(last) - sum(first)))
    gpu = [int(line.split()[1]) for line in read_gz(FIXTURE / "gpu.csv.gz").splitlines()]
    assert 11.5 < busy < 12.0 and 26 < sum(gpu) / len(gpu) < 28


def test_nine_sanitizer_processes_held_under_8_gib_of_the_gpu_s_80_together():
    """The pool gives an H100 one scan process per 8 GiB (9); the nine memcheck and initcheck processes held
    at most 7296 MiB in all, each second sampled: sixteen would fit the memory many times over."""
    used = [int(line.split()[3]) for line in read_gz(FIXTURE / "gpu.csv.gz").splitlines()]
    assert max(used) == 7296 and "81559 MiB" in (FIXTURE / "env.txt").read_text()


def test_seven_initcheck_roots_all_new_no_memcheck_root():
    doc = document("whole")
    roots = {r["site"]: r for r in doc["roots"]}
    assert len(roots) == 7 and {r["tool"] for r in roots.values()} == {"initcheck"}
    assert {r["kind"] for r in roots.values()} == {"uninitialized-access"}
    assert all(r["known"] is None for r in roots.values())
    sink = roots["src/ggml-cuda/fattn-mma-f16.cuh:1357"]
    assert sink["cases"] == 22 and sink["source_line"].strip() == "const float sink = sinks_f[jc % ncols2];"
    assert roots["src/ggml-cuda/getrows.cu:99"]["smallest"]["params"].startswith("type=i32,")


@pytest.mark.parametrize("process", WHOLE_LOGS)
def test_a_recorded_initcheck_process_is_judged_again_as_the_device_judged_it(process):
    doc = document("whole")
    _, records = rejudge_unlisted(process)
    before = recorded(doc, process, "initcheck")
    assert {r.params: r.state for r in records} == {p: c["state"] for p, c in before.items()}
    assert any(r.state == "findings" for r in records)


# ------------------------------------------------------------------ the GET_ROWS draft, inconclusive then fixed

def host_api_records(text: str) -> int:
    return len(re.findall(r"Host API memory access error", text))


def test_test_mode_prints_the_host_apis_records_first_and_the_print_limit_hid_the_kernels():
    full = read_gz(FIXTURE / "limit0.log.gz")
    report = parse_sanitizer(full, "initcheck")
    by_label = {site_label(s): s for s in report.sites}
    assert report.error_count == 1628 and by_label["host API (cudaMemcpy source)"].count == 608
    assert by_label["host API (cudaMemcpy source)"].kind == HOST_API_KIND
    assert by_label["getrows.cu:99"].count == 1020
    first_hundred = report.findings[:100]
    assert {f.kind for f in first_hundred} == {HOST_API_KIND}      # what --print-limit 100 printed
    run = json.loads(read_gz(FIXTURE / "draft-run.json.gz"))["outcome"]
    assert run["verdict"] == "inconclusive" and run["attempts"][0]["evidence"]["sites"] == []


def test_without_the_host_apis_checks_the_kernels_records_come_first():
    text = read_gz(FIXTURE / "api-no.log.gz")
    report = parse_sanitizer(text, "initcheck")
    assert host_api_records(text) == 0 and report.error_count == 1020
    assert [site_label(s) for s in report.sites] == ["getrows.cu:99"]


def _getrows_root() -> dict:
    return next(r for r in document("getrows")["roots"] if r["site"] == "src/ggml-cuda/getrows.cu:99")


def test_the_draft_now_turns_the_host_apis_checks_off_for_a_kernels_initcheck_root():
    assert "--check-api-memory-access" not in (FIXTURE / "draft-D19.md").read_text()   # as the device wrote it
    assert sanitizer_options("initcheck", "uninitialized-access")[-2:] == ("--check-api-memory-access", "no")
    assert sanitizer_options("racecheck", "race-hazard") == ("--show-backtrace", "device")
    assert "--check-api-memory-access" not in sanitizer_options("initcheck", HOST_API_KIND)
    assert "--check-api-memory-access" not in sanitizer_options("memcheck", "abort:ggml-assert")


@pytest.fixture()
def redrafted(tmp_path) -> Path:
    root = _getrows_root()
    text = render_draft(root, DraftContext("D19", "d99724f2b141fed9e1a9f402213506c081433465", "ggml-d99724f2",
                                           "20261207-005922.709420-0001-discover", "2026-12-07"), None)
    folder = tmp_path / "drafts"
    folder.mkdir()
    (folder / "D19.md").write_text(text)
    return folder


def judged_log(folder: Path, entry_id: str, text: str, tmp_path: Path, argv: list[str] | None = None):
    """A log judged with an entry of ``folder`` as a run of its default step that printed ``text`` (the
    sanitizer's records in the program's own output, as without --log-file, and in the sanitizer log)."""
    entry = load_registry(folder).get(entry_id)
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    for name in ("fast-1.stdout.log", "fast-1.sanitizer.log"):
        (logs / name).write_text(text)
    (logs / "fast-1.stderr.log").write_text("")
    (logs / "fast-1.cmd.json").write_text(json.dumps({"result": {
        "argv": argv or ["compute-sanitizer", "--tool", "initcheck", "test-backend-ops"], "returncode": 99,
        "signal": None, "duration_s": 1.4}}))
    obs = observe(entry.default_step, [recorded_command(logs, "fast-1", logs / "fast-1.stdout.log")],
                  [logs / "fast-1.sanitizer.log"])
    return judge_attempt(entry, obs, Gate(True, "initcheck control passed"), 1, 1.0)


def test_the_redrafted_entry_lints_and_confirms_the_log_run_without_the_host_apis_checks(redrafted, tmp_path):
    path = redrafted / "D19.md"
    match = FRONT_MATTER.match(path.read_text())
    raw = RawEntry(path=path, data=tomllib.loads(match.group("toml")), body=match.group("body"))
    assert [str(p) for p in lint_raw(raw)] == []
    entry = load_registry(redrafted).get("D19")
    step = entry.default_step
    assert step.sanitizer_options == ("--show-backtrace", "device", "--check-api-memory-access", "no")
    argv = ["compute-sanitizer", "--tool", "initcheck", *step.sanitizer_options, "test-backend-ops", "test",
            "-o", "GET_ROWS", "-b", "CUDA0", "-p", f"^{GET_ROWS_I32}$"]
    attempt = judged_log(redrafted, "D19", read_gz(FIXTURE / "api-no.log.gz"), tmp_path, argv)
    assert attempt.verdict is Verdict.CONFIRMED
    assert any("getrows.cu:99" in line for line in attempt.evidence.quoted)


def test_a_log_of_host_api_records_only_is_inconclusive_naming_the_api(redrafted, tmp_path):
    """The device's run with the draft as it was: every printed record a host API one. The log is the
    unlimited run's first 100 records, as --print-limit 100 printed them (the run's own log was not kept)."""
    full = read_gz(FIXTURE / "limit0.log.gz").splitlines(keepends=True)
    records, kept = 0, []
    for line in full:
        if "Host API memory access error" in line:
            records += 1
        if records > 100:
            break
        kept.append(line)
    kept += ["========= ERROR SUMMARY: 1528 errors were not printed. Use --print-limit option to adjust the number "
             "of printed errors\n", "========= ERROR SUMMARY: 1628 errors\n"]
    attempt = judged_log(redrafted, "D19", "".join(kept), tmp_path)
    assert attempt.verdict is Verdict.INCONCLUSIVE
    assert "1628 error(s) at host API (cudaMemcpy source)" in attempt.reason


def test_every_gz_file_of_the_fixture_is_gzip():
    for path in FIXTURE.rglob("*.gz"):
        with gzip.open(path, "rb") as opened:
            opened.read(16)


def test_a_host_api_root_drafts_an_entry_that_lints_and_confirms_the_test_mode_log(tmp_path):
    """A root of host API records (none came out of the launch mode's discovery; test mode makes them):
    its draft holds to the kind alone, keeps the host API's checks on, and confirms the unlimited log."""
    root = dict(_getrows_root())
    api = "host API (cudaMemcpy source)"
    root.update(kind=HOST_API_KIND, site=api, function=api, path=None, line=None, source_line=None, kernels={},
                instantiations={}, example={"message": "Host API memory access error at host access to 0x7f83d6801000"})
    text = render_draft(root, DraftContext("D20", None, "ggml-d99724f2", None, "2026-12-07"), None)
    assert 'title = "initcheck host-api-access at host API (cudaMemcpy source)"' in text
    assert "--check-api-memory-access" not in text and "site =" not in text
    folder = tmp_path / "drafts"
    folder.mkdir()
    (folder / "D20.md").write_text(text)
    match = FRONT_MATTER.match(text)
    raw = RawEntry(path=folder / "D20.md", data=tomllib.loads(match.group("toml")), body=match.group("body"))
    assert [str(p) for p in lint_raw(raw)] == []
    attempt = judged_log(folder, "D20", read_gz(FIXTURE / "limit0.log.gz"), tmp_path)
    assert attempt.verdict is Verdict.CONFIRMED
    # the kind alone is no licence: a log with the kernel's records and no host API one does not confirm it
    other = judged_log(folder, "D20", read_gz(FIXTURE / "api-no.log.gz"), tmp_path / "api-no")
    assert other.verdict is Verdict.INCONCLUSIVE and "getrows.cu:99" in other.reason


def test_a_host_api_record_groups_into_a_root_named_by_its_call_not_a_question_mark():
    from kvdiag.engine.discover.findings import from_sanitizer
    from kvdiag.engine.discover.roots import root_key

    report = parse_sanitizer(read_gz(FIXTURE / "limit0.log.gz"), "initcheck")
    keys = Counter(root_key(from_sanitizer(f, "initcheck")) for f in report.findings)
    assert {(k.kind, k.site, k.function): n for k, n in keys.items()} == {
        ("uninitialized-access", "getrows.cu:99", "k_get_rows_float"): 1020,
        (HOST_API_KIND, "host API (cudaMemcpy source)", "host API (cudaMemcpy source)"): 608}


# ------------------------------------------------------------------ D19: the sink read past the tensor

SINK_SMALLEST = ("hsk=128,hsv=128,nh=4,nr23=[12,1],kv=512,nb=3,mask=1,sinks=1,max_bias=0.000000,"
                 "logit_softcap=0.000000,prec=def,type_K=f16,type_V=f16,permute=[0,2,1,3],kv_view=1,v_is_view_of_k=0")


def test_d19_is_the_discovered_sink_root_and_its_repro_is_the_smallest_case_alone():
    doc = document("whole")
    sink = next(r for r in doc["roots"] if r["site"] == "src/ggml-cuda/fattn-mma-f16.cuh:1357")
    assert sink["smallest"]["params"] == SINK_SMALLEST and sink["known"] is None   # new when it was found
    d19 = load_registry(REGISTRY).get("D19")
    assert re.search(d19.default_step.vars["params"], SINK_SMALLEST)
    fa = [c["params"] for c in doc["cases"] if c["op"] == "FLASH_ATTN_EXT" and c["tool"] == "initcheck"]
    assert [p for p in fa if re.search(d19.default_step.vars["params"], p)] == [SINK_SMALLEST]
    hit = {c["params"] for c in doc["cases"] if c["state"] == "findings"
           and any(f["line"] == 1357 for f in c["findings"])}
    assert len(hit) == 22 and all(re.search(d19.scan.params, p) for p in hit)    # its scan space holds each
    assert all("mask=1," in p and "max_bias=0.000000" in p and re.search(r"nr23=\[(12|20),1\]", p) for p in hit)


def test_d19_is_confirmed_from_the_discoverys_record_of_its_smallest_case():
    from kvdiag.engine.evidence.observe import observe_segment
    from kvdiag.engine.scan.batch import batch_step
    from kvdiag.engine.scan.cases import scan_step

    entry = load_registry(REGISTRY).get("D19")
    text = strip_ansi(read_gz(FIXTURE / "logs" / "whole" / "initcheck-00214.stdout.log.gz"))
    split = split_cases(text, "initcheck")
    obs = observe_segment(batch_step(scan_step(entry)), text, split, split.segment(SINK_SMALLEST), False)
    attempt = judge_attempt(entry, obs, Gate(True, "initcheck's control passed on the H100"), 1, 0.0)
    assert attempt.verdict is Verdict.CONFIRMED, attempt.reason
    assert any("fattn-mma-f16.cuh:1357" in line for line in attempt.evidence.quoted)
    assert attempt.evidence.error_count == 64
    assert [(site["site"], site["count"]) for site in attempt.evidence.sites] == [("fattn-mma-f16.cuh:1357", 64)]


def test_d19_matches_the_discovered_root_as_known_now():
    from kvdiag.engine.discover.matching import match_roots
    from kvdiag.engine.discover.result import from_document

    roots = from_document(document("whole")).roots
    match_roots(roots, load_registry(REGISTRY).entries)
    known = {root.key.site: root.known for root in roots}
    assert known["src/ggml-cuda/fattn-mma-f16.cuh:1357"] == "D19"
    assert known["src/ggml-cuda/getrows.cu:127"] == "D20"            # cuBLAS's outputs (session 24)
    assert known["src/ggml-cuda/convert.cu:437"] == "D21"            # cuBLAS's outputs (session 25)
    assert known["src/ggml-cuda/getrows.cu:99"] == "D22"             # the test's own initialisation (session 26)
    assert {site: known[site] for site in ("src/ggml-cuda/mmq.cuh:925", "src/ggml-cuda/mmq.cuh:1124",
                                           "src/ggml-cuda/mmq.cuh:1346")} == dict.fromkeys(
        ("src/ggml-cuda/mmq.cuh:925", "src/ggml-cuda/mmq.cuh:1124", "src/ggml-cuda/mmq.cuh:1346"), "D23")
    assert [site for site, entry in known.items() if entry is None] == []      # no root new since session 26
