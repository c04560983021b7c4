"""`kvdiag discover` on a staged suite: every case judged or cut, grouped into roots, matched, drafted.

The staged build is tests/scenarios/builds/backend_ops_suite.py under the stand-in
compute-sanitizer (tests/scenarios/fake_compute_sanitizer.py), which reports into the
program's terminal as the real tool does without --log-file. The suite holds a race in a
kernel (CPY), a race in an inlined device function with a racecheck warning beside it
(SOFT_MAX), an abort in the middle of a batch (MUL_MAT), a case that never ends (GET_ROWS),
clean cases (ADD) and an op the backend refuses (SCALE).
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_helpers import Scenarios, make_target  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from isolation import isolate  # noqa: E402

from kvdiag.cli import main
from kvdiag.controls.gate import Gate
from kvdiag.engine.discover import session as discover_session
from kvdiag.engine.discover.costs import CaseCosts
from kvdiag.engine.discover.result import from_document
from kvdiag.report.discover_formats import render
from kvdiag.registry.lint import lint_raw
from kvdiag.registry.loader import load_registry
from kvdiag.registry.raw import FRONT_MATTER, RawEntry

BUDGET = "3"
CPY_SOURCE = ["// cpy.cu of the staged tree", "#include \"cpy.cuh\"", ""] + [f"// filler {i}" for i in range(3, 49)] + [
    "template <cpy_kernel_t cpy_blck, int qk>",
    "static __global__ void cpy_f32_q(const char * cx, char * cdst, const int ne) {",
    "    const int i = blockDim.x*blockIdx.x + threadIdx.x;",
    "    if (i >= ne) {",
    "        return;",
    "    }",
    "    __shared__ float buf[qk];",
    "    buf[threadIdx.x] = cx[i];",      # line 57: the race's write
    "    const float v = buf[threadIdx.x ^ 1];",
    "    __syncwarp();",
    "    cdst[i] = v;",                   # line 60
    "}",
]
KNOWN_ENTRY = """
[applies]
ops = ["SOFT_MAX"]

[requires]
binaries = ["test-backend-ops"]
gpu = true
sanitizer = true

[[repro]]
name = "fast"
kind = "backend-ops"
default = true
description = "a soft_max case under racecheck"
argv = ["{{ bin['test-backend-ops'] }}", "test", "-o", "SOFT_MAX", "-b", "{{ backend }}"]
timeout = 60
sanitizer = "racecheck"

[[signature]]
type = "sanitizer"
tool = "racecheck"
kind = "race-hazard"
site = 'common\\.cuh:\\d+'
kernel = '^block_reduce$'
"""


def staged_build(kv: Scenarios) -> Path:
    """The suite's build, and the source tree its CMakeCache names (the files the roots point into)."""
    build = kv.build("backend_ops_suite")
    source = build.parent / f"{build.name}-src" / "src" / "ggml-cuda"
    source.mkdir(parents=True)
    (source / "cpy.cu").write_text("\n".join(CPY_SOURCE) + "\n")
    (source / "common.cuh").write_text("// common\n" * 600)
    return build


@dataclass
class Discovered:
    root: Path
    build: Path
    code: int
    doc: dict
    drafts: Path
    kv: Scenarios
    stderr: str


@pytest.fixture(scope="module")
def discovered(tmp_path_factory) -> Discovered:
    root = tmp_path_factory.mktemp("discover")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, root)
        kv = Scenarios(root / "kv")
        kv.entry("D901", KNOWN_ENTRY)
        build = staged_build(kv)
        sanitizer = kv.sanitizer()
        target = make_target(build, log_dir=root / "target-logs", sanitizer=sanitizer)
        trusted = {"racecheck", "synccheck"}
        mp.setattr(discover_session, "prepare_target", lambda *a, **k: target)
        mp.setattr(discover_session, "controls_gate_provider",
                   lambda *a, **k: (lambda tool: Gate(tool in trusted, f"{tool}'s staged control")))
        saved, drafts = root / "discover.json", root / "drafts"
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "-j", "2",
                         "--case-budget", BUDGET, "--save", str(saved), "--draft-into", str(drafts),
                         "--format", "json"])
        yield Discovered(root, build, code, json.loads(saved.read_text()), drafts, kv, err.getvalue())


def roots_by_site(doc: dict) -> dict[str, dict]:
    return {r["site"]: r for r in doc["roots"]}


def test_every_case_of_every_trusted_tool_is_judged_or_cut_with_why(discovered):
    doc = discovered.doc
    assert doc["tools"] == ["racecheck", "synccheck"]          # memcheck and initcheck: controls not passed
    assert doc["gates"]["memcheck"]["run"] is False
    assert doc["space"]["not_supported"] == {"SCALE": 1}
    assert doc["space"]["no_cases"] == []          # every op --list-ops names has a case here
    listed = doc["space"]["cases"]
    assert listed == 15
    keys = [(c["tool"], c["op"], c["params"]) for c in doc["cases"]]
    assert len(keys) == len(set(keys)) == 2 * listed             # never dropped, never twice
    totals = doc["totals"]
    assert totals["judged"] + totals["cut"] == 2 * listed
    cut = [c for c in doc["cases"] if c["state"] == "cut"]
    assert [(c["op"], c["params"]) for c in cut] == [("GET_ROWS", "type=f32,n=256,m=5,r=4,v=9")] * 2
    assert all("over its budget" in c["why"] for c in cut)


def test_each_process_row_says_when_it_ran_and_the_run_how_many_ran_at_once(discovered):
    doc = discovered.doc
    for row in doc["processes"]:
        assert row["ended_unix"] >= row["started_unix"] > 1.7e9
    ran = doc["occupancy"]
    assert ran["pool"] == 2 and 1 <= ran["most"] <= 2
    assert 0 <= ran["tail_s"] <= ran["span_s"] <= doc["wall_s"] + 1
    text = render(from_document(doc), "text")
    assert "processes at once: at most " in text and "of the pool's 2" in text


def test_findings_group_into_one_root_per_site_and_function(discovered):
    roots = roots_by_site(discovered.doc)
    cpy = roots["src/ggml-cuda/cpy.cu:57"]
    assert (cpy["tool"], cpy["kind"], cpy["function"]) == ("racecheck", "race-hazard", "cpy_f32_q")
    assert cpy["cases"] == 2 and cpy["ops"] == {"CPY": 2}
    assert cpy["errors"] == 128                                   # 64 hazards in each case
    assert cpy["smallest"] == {"op": "CPY", "params": "type_src=f32,type_dst=q4_0,ne=[32,4,1,1]",
                               "elements": 32 * 4}
    assert cpy["numeric_failed"] == 1                             # ne=[4096,...] FAILs as well
    assert cpy["source_line"] == "buf[threadIdx.x] = cx[i];"
    helper = roots["src/ggml-cuda/common.cuh:512"]
    assert helper["function"] == "block_reduce" and list(helper["kernels"]) == ["soft_max_f32"]


def test_racecheck_warnings_are_listed_apart(discovered):
    warnings = discovered.doc["warnings"]
    assert [(w["site"], w["warning"]) for w in warnings] == [("softmax.cu:170", True)]
    assert "softmax.cu:170" not in roots_by_site(discovered.doc)


def test_an_abort_in_the_middle_of_a_batch_is_a_root_and_the_rest_of_the_batch_runs_again(discovered):
    doc = discovered.doc
    aborts = [r for r in doc["roots"] if r["kind"].startswith("abort:")]
    assert [(r["kind"], r["site"], r["cases"]) for r in aborts] == [("abort:ggml-assert", "ggml-cuda.cu:1234", 2)]
    assert aborts[0]["tools"] == {"racecheck": 1, "synccheck": 1}
    mul_mat = {(c["tool"], c["params"]): c["state"] for c in doc["cases"] if c["op"] == "MUL_MAT"}
    assert sorted(set(mul_mat.values())) == ["aborted", "clean"]
    assert [p for (t, p), s in mul_mat.items() if s == "aborted"] == ["type_a=f16,m=16,n=7,k=250"] * 2
    invoked = (discovered.build / "invocations.log").read_text()
    assert "MUL_MAT ^(type_a=f16,m=16,n=9,k=256)$" in invoked       # after the abort, alone or in a half


def test_roots_are_matched_against_the_registry_and_only_new_ones_drafted(discovered):
    roots = roots_by_site(discovered.doc)
    assert roots["src/ggml-cuda/common.cuh:512"]["known"] == "D901"
    assert roots["src/ggml-cuda/cpy.cu:57"]["known"] is None
    drafted = sorted(p.name for p in discovered.drafts.glob("D*.md"))
    assert drafted == ["D902.md", "D903.md"]                      # the CPY race and the abort; D901 known
    assert discovered.code == 1


def draft_of(discovered: Discovered, file: str):
    """The draft whose location names ``file``."""
    entries = [e for e in load_registry(discovered.drafts).entries if any(file in f for f in e.location["files"])]
    assert len(entries) == 1
    return entries[0]


def _lint(path: Path) -> list[str]:
    text = path.read_text()
    match = FRONT_MATTER.match(text)
    data = tomllib.loads(match.group("toml"))
    return [str(p) for p in lint_raw(RawEntry(path=path, data=data, body=match.group("body")))]


def test_a_draft_lints_unedited_and_names_its_site_by_context(discovered):
    for path in discovered.drafts.glob("D*.md"):
        assert _lint(path) == [], path.name
    entry = draft_of(discovered, "cpy.cu")
    assert entry.status == "draft"
    site = entry.location["sites"][0]
    assert site["holds"] == "buf[threadIdx.x] = cx[i];"
    assert site["anchor"].startswith("static __global__ void cpy_f32_q(")
    step = entry.default_step
    assert step.sanitizer == "racecheck" and step.vars["op"] == "CPY"
    assert step.vars["params"] == r"^type_src=f32,type_dst=q4_0,ne=\[32,4,1,1\]$"
    assert "human" in entry.path.read_text()


def test_a_draft_confirms_on_the_build_it_was_found_on(discovered):
    entry = draft_of(discovered, "cpy.cu")
    target = make_target(discovered.build, log_dir=discovered.root / "draft-run-logs",
                         sanitizer=discovered.kv.sanitizer())
    outcome = discovered.kv.run(entry, target).outcome
    assert outcome.verdict.value == "confirmed", outcome.reason
    assert any("cpy.cu:57" in line for line in outcome.attempts[0].evidence.quoted)


def test_drafting_again_into_the_same_folder_adds_nothing(discovered):
    from kvdiag.commands.discover import write_drafts_for

    result = from_document(discovered.doc, load_registry(discovered.kv.registry_dir).entries)
    lines = write_drafts_for(result, discovered.drafts, load_registry(discovered.kv.registry_dir))
    assert all("already drafted as" in line for line in lines) and len(lines) == 2
    assert sorted(p.name for p in discovered.drafts.glob("D*.md")) == ["D902.md", "D903.md"]


def test_the_saved_document_rebuilds_the_same_roots(discovered):
    again = from_document(discovered.doc)
    assert [r.to_dict()["site"] for r in again.defects] == [r["site"] for r in discovered.doc["roots"]]


@pytest.mark.parametrize("fmt", ["text", "markdown", "sarif", "html", "json"])
def test_every_format_shows_the_roots(discovered, fmt):
    shown = render(from_document(discovered.doc), fmt)
    assert ("src/ggml-cuda/cpy.cu" if fmt == "sarif" else "cpy.cu:57") in shown
    if fmt in ("sarif", "json"):
        json.loads(shown)


def _staged_discovery(tmp_path: Path, mp: pytest.MonkeyPatch) -> tuple[Scenarios, Path]:
    isolate(mp, tmp_path)
    kv = Scenarios(tmp_path / "kv")
    build = staged_build(kv)
    target = make_target(build, log_dir=tmp_path / "target-logs", sanitizer=kv.sanitizer())
    mp.setattr(discover_session, "prepare_target", lambda *a, **k: target)
    mp.setattr(discover_session, "controls_gate_provider", lambda *a, **k: (lambda tool: Gate(True, "staged")))
    # The shipped rates were measured on the real suite; the staged one's order is its case counts'.
    mp.setattr(discover_session, "discover_costs", lambda home, mode: CaseCosts())
    return kv, build


def _stopped_by_ctrl_c(tmp_path: Path, monkeypatch) -> tuple[int, dict]:
    """The staged suite, one process at a time, Ctrl-C after 6 s (GET_ROWS v=9 hangs by then)."""
    import _thread
    import threading

    kv, build = _staged_discovery(tmp_path, monkeypatch)
    saved = tmp_path / "d.json"
    timer = threading.Timer(6.0, _thread.interrupt_main)
    timer.start()
    try:
        code = main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "-j", "1", "--batch", "3",
                     "--case-budget", "120", "--tool", "racecheck,synccheck", "--save", str(saved),
                     "--format", "json"])
    finally:
        timer.cancel()
    return code, json.loads(saved.read_text())


def test_a_discovery_stopped_by_ctrl_c_keeps_every_case_once_and_names_the_unrun(tmp_path, monkeypatch):
    """Ctrl-C while a process hangs: what finished is kept once (dispatch hands every finished unit to
    the salvage again: on the H100 that doubled 8991 records), so is each case of the hung process that
    printed its status; the running case, the rest and those never started are cut, each saying why,
    and the exit is 130."""
    code, doc = _stopped_by_ctrl_c(tmp_path, monkeypatch)
    keys = [(c["tool"], c["op"], c["params"]) for c in doc["cases"]]
    assert code == 130 and doc["interrupted"] is True
    assert len(keys) == len(set(keys)) == 2 * 15
    states = {c["state"] for c in doc["cases"]}
    assert "cut" in states and states & {"clean", "findings"}
    unrun = [c for c in doc["cases"] if c["why"] and "interrupted before its process started" in c["why"]]
    assert unrun and all(c["state"] == "cut" for c in unrun)
    # The process that hung: its case that printed a status before the hang is judged, the rest cut.
    hung = {c["params"]: (c["state"], c["why"]) for c in doc["cases"] if c["tool"] == "racecheck" and c["op"] == "GET_ROWS"}
    assert hung == {"type=f32,n=256,m=5,r=4,v=0": ("clean", None),
                    "type=f32,n=256,m=5,r=4,v=9": ("cut", "interrupted (Ctrl-C) before it was judged"),
                    "type=f16,n=256,m=5,r=4,v=0": ("cut", "interrupted (Ctrl-C) before it was judged")}



def test_a_stopped_process_whose_output_is_too_large_to_read_promptly_is_cut_whole(tmp_path, monkeypatch):
    from kvdiag.engine.discover import batch

    monkeypatch.setattr(batch, "INTERRUPTED_READ_BYTES", 0)
    code, doc = _stopped_by_ctrl_c(tmp_path, monkeypatch)
    hung = [c for c in doc["cases"] if c["tool"] == "racecheck" and c["op"] == "GET_ROWS"]
    assert code == 130 and len(hung) == 3 and all(c["state"] == "cut" for c in hung)
    assert all("of output left unread, so that Ctrl-C stays prompt" in c["why"] for c in hung)

def test_the_tools_take_turns_so_a_discovery_cut_short_has_judged_some_of_each():
    from kvdiag.engine.discover.space import SuiteSpace

    space = SuiteSpace(supported={"A": tuple(f"a={i}" for i in range(6)), "B": ("b=1",)})
    units = discover_session.plan_units(space, ("racecheck", "synccheck"), all_workers=2)
    assert [(u.tool, len(u.cases)) for u in units] == [("racecheck", 3), ("synccheck", 3), ("racecheck", 3),
                                                        ("synccheck", 3), ("racecheck", 1), ("synccheck", 1)]


def test_an_ops_heaviest_cases_are_dealt_over_its_processes_and_the_heaviest_process_starts_first():
    """test-backend-ops lists shapes small to large: sliced, one process would get every large row."""
    from kvdiag.engine.discover.space import SuiteSpace

    rows = tuple(f"ne=[{1 << i},1,1,1],k=1" for i in range(4, 12))          # 16 .. 2048 elements, in order
    space = SuiteSpace(supported={"TOP_K": rows})
    units = discover_session.plan_units(space, ("racecheck",), all_workers=2)
    assert [u.cases for u in units] == [rows[1::2], rows[0::2]]             # dealt; the heavier share first
    assert all(len(u.cases) == 4 for u in units)


def test_shards_merge_into_the_roots_of_the_whole_discovery(tmp_path, monkeypatch, discovered):
    kv, build = _staged_discovery(tmp_path, monkeypatch)
    parts = []
    for index in (1, 2):
        part = tmp_path / f"part{index}.json"
        assert main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "-j", "2",
                     "--case-budget", BUDGET, "--tool", "racecheck,synccheck", "--shard", f"{index}/2",
                     "--save", str(part), "--format", "json"]) in (0, 1, 4)
        parts.append(part)
    merged = tmp_path / "merged.json"
    assert main(["--registry", str(kv.registry_dir), "merge", *map(str, parts), "-o", str(merged),
                 "--format", "json"]) == 1
    doc = json.loads(merged.read_text())
    whole = discovered.doc
    assert sorted((c["tool"], c["op"], c["params"], c["state"]) for c in doc["cases"]) == sorted(
        (c["tool"], c["op"], c["params"], c["state"]) for c in whole["cases"])
    assert [(r["site"], r["cases"]) for r in doc["roots"]] == [(r["site"], r["cases"]) for r in whole["roots"]]
    assert doc["occupancy"] is None and all("started_unix" in row for row in doc["processes"])
    assert main(["merge", str(parts[0]), "-o", str(tmp_path / "half.json")]) == 64   # shard 2/2 missing


def test_warnings_count_as_roots_only_when_asked(discovered):
    result = from_document(discovered.doc)
    assert [r.key.site for r in result.warnings] == ["softmax.cu:170"]
    result.count_warnings = True
    assert result.warnings == [] and "softmax.cu:170" in [r.key.site for r in result.defects]


def test_a_megabyte_line_without_a_space_is_cut_before_judging_and_the_process_row_says_so(tmp_path, monkeypatch):
    kv, build = _staged_discovery(tmp_path, monkeypatch)
    (build / "long-line").write_text("")
    saved = tmp_path / "d.json"
    assert main(["--registry", str(kv.registry_dir), "discover", "--build", str(build), "--ops", "ADD",
                 "--tool", "racecheck", "--case-budget", BUDGET, "--save", str(saved), "--format", "json"]) == 0
    doc = json.loads(saved.read_text())
    assert [c["state"] for c in doc["cases"]] == ["clean", "clean"]
    assert any("cut to that length" in (row.get("lines_cut") or "") for row in doc["processes"])
