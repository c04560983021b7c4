"""Case attribution: a walk that dies unplaced gets its case re-run alone, and the verdict names it.

Staged by tests/scenarios/builds/backend_ops_walk_dies.py: a walk of hsk=320 cases that dies
in the case `<build>/dies-at.txt` names, printing every case only after it ran (current ggml).
"""

from __future__ import annotations

from pathlib import Path

from engine_helpers import D2_CASE, REGISTRY
from kvdiag.engine.run.attribution import attribute_outcome
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

TEMPLATE = ("hsk=320,hsv=256,nh=4,nr23=[{nr}],kv=512,nb={nb},mask=0,sinks=0,max_bias=0.000000,"
            "logit_softcap=0.000000,prec=f32,type_K={t},type_V={t},permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
FOURTH = TEMPLATE.format(nr="4,1", nb=32, t="f16")     # the 4th listed, 3rd supported case
FIFTH = TEMPLATE.format(nr="4,1", nb=75, t="f16")


def _entry(entry_id: str):
    return load_registry(REGISTRY).get(entry_id)


def _stage(kv, dies: dict[str, str], cases: list[str] | None = None) -> Path:
    build = kv.build("backend_ops_walk_dies")
    (build / "dies-at.txt").write_text("".join(f"{p}\t{m}\n" for p, m in dies.items()))
    if cases is not None:
        (build / "case-space.txt").write_text("".join(c + "\n" for c in cases))
    return build


def _invocations(build: Path) -> list[str]:
    return (build / "invocations.log").read_text().splitlines()


def test_d1_abort_names_the_exact_case_and_quotes_its_own_output(kv):
    build = _stage(kv, {FOURTH: "ggml-abort"})
    run = kv.run(_entry("D1"), kv.target(build, sanitizer=None), attribute=attribute_outcome)
    assert run.outcome.verdict is Verdict.CONFIRMED
    assert run.evidence.running_case.startswith("the case after FLASH_ATTN_EXT(hsk=320,hsv=256,nh=4,nr23=[1,1]")
    found = run.outcome.extra["case"]
    assert found["case"] == f"FLASH_ATTN_EXT({FOURTH})"
    assert found["processes"] == 1 and found["verdict"] == "confirmed"
    assert "/src/llama.cpp/ggml/src/ggml-cuda/fattn.cu:380: fatal error" in found["quoted"]
    assert any(
        "fattn.cu:380: fatal error" in line for line in found["output"])
    assert f"case: FLASH_ATTN_EXT({FOURTH}) (reproduced alone" in run.outcome.reason
    # the walk, then the one case alone (by its exact regex), and nothing more
    assert len(_invocations(build)) == 2 and _invocations(build)[1].startswith("^hsk=320")
    assert "attribute-case001.stdout.log" in run.log_names() and found["log"].endswith("attribute-case001.combined.log")


def test_a_segfault_is_inconclusive_and_still_placed(kv):
    build = _stage(kv, {FIFTH: "segv"})
    run = kv.run(_entry("D1"), kv.target(build, sanitizer=None), attribute=attribute_outcome)
    assert run.outcome.verdict is Verdict.INCONCLUSIVE
    found = run.outcome.extra["case"]
    assert found["case"] == f"FLASH_ATTN_EXT({FIFTH})" and found["exit"] == run.evidence.exit
    assert found["tried"][0]["case"] == found["case"]


def test_d2_none_printed_under_the_sanitizer_names_the_case(kv):
    build = _stage(kv, {D2_CASE: "sanitizer"}, cases=[D2_CASE])
    d2 = _entry("D2")
    run = kv.run(d2, kv.target(build, sanitizer=kv.sanitizer("follow")), attribute=attribute_outcome)
    assert run.outcome.verdict is Verdict.CONFIRMED
    assert run.evidence.cases_matched == 0 and run.evidence.exit == "exit 99"
    found = run.outcome.extra["case"]
    assert found["case"] == f"FLASH_ATTN_EXT({D2_CASE})" and found["error_count"] == 2048
    # its own output: the findings that matched in its sanitizer log first, then how it died
    assert found["sanitizer_log"].endswith("attribute-case001.sanitizer.log")
    assert found["output"][0] == "Barrier error detected. Divergent thread(s) in block."
    assert found["output"][1].startswith("at void flash_attn_ext_f16_process_tile<") and \
        found["output"][1].endswith("in fattn-mma-f16.cuh:1607")


def test_candidates_run_onward_until_the_bound_and_the_verdict_says_so(kv, monkeypatch):
    import kvdiag.engine.run.attribution as attribution

    monkeypatch.setattr(attribution, "MAX_CASES", 2)
    build = _stage(kv, {FOURTH: "walk-only"})
    run = kv.run(_entry("D1"), kv.target(build, sanitizer=None), attribute=attribute_outcome)
    assert run.outcome.verdict is Verdict.CONFIRMED
    found = run.outcome.extra["case"]
    assert found["case"] is None and [t["case"] for t in found["tried"]] == [
        f"FLASH_ATTN_EXT({FOURTH})", f"FLASH_ATTN_EXT({FIFTH})"]
    assert "none of the first 2 of 4 candidate case(s) reproduced alone" in found["why_not"]
    assert "case not found" in run.outcome.reason


def test_without_the_hook_the_walk_is_judged_alone(kv):
    """`kvdiag run` and `sweep` hand the hook in; library callers (bisect, verify) do without."""
    build = _stage(kv, {FOURTH: "ggml-abort"})
    run = kv.run(_entry("D1"), kv.target(build, sanitizer=None))
    assert run.outcome.verdict is Verdict.CONFIRMED and "case" not in run.outcome.extra
    assert len(_invocations(build)) == 1


def test_a_walk_that_finishes_is_not_re_run(kv):
    build = _stage(kv, {})
    run = kv.run(_entry("D1"), kv.target(build, sanitizer=None), attribute=attribute_outcome)
    assert run.outcome.verdict is Verdict.NOT_REPRODUCED and "case" not in run.outcome.extra
    assert len(_invocations(build)) == 1


# ------------------------------------------------------------------ recorded H200 output

def _recorded(name: str) -> str:
    import gzip

    path = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-ggml-d99724f2" / name
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


def _judged(entry, tmp_path, stdout: str, **kw):
    from test_recorded_device_runs import judge_recorded, recorded_result

    tmp_path.mkdir(parents=True, exist_ok=True)
    return judge_recorded(entry, recorded_result(tmp_path, stdout, **kw))


def test_recorded_walks_that_finish_or_die_unplaced(tmp_path):
    from kvdiag.engine.run.attribution import candidate_cases, needs_attribution
    from kvdiag.parse.backend_ops import parse_backend_ops

    d1, d2 = _entry("D1"), _entry("D2")
    full = _recorded("D1-hsk320.stdout.log.gz")
    finished = _judged(d1, tmp_path / "a", full)
    assert not needs_attribution(d1.default_step, finished)
    # The same walk cut after its 100th case line and ended by an abort, as on BeeLlama.
    lines = full.splitlines(keepends=True)
    case_rows = [i for i, line in enumerate(lines) if "FLASH_ATTN_EXT(" in line]
    died = _judged(d1, tmp_path / "b", "".join(lines[:case_rows[99] + 1]),
                   stderr="/src/ggml/src/ggml-cuda/fattn.cu:380: fatal error\n", returncode=None, signal=6)
    assert needs_attribution(d1.default_step, died)
    cases = parse_backend_ops(full).cases
    assert died.evidence.last_finished_case == cases[99].params
    listed = [c.params for c in cases]
    supported = [c.params for c in cases if c.status == "OK"]
    after = candidate_cases(listed, supported, died.evidence.last_finished_case)
    assert after == [p for p in supported if listed.index(p) > 99] and after
    assert candidate_cases(listed, supported, None) == supported
    # D2 on the H200: the sanitizer ended the process before any case line (exit 99)
    none_printed = _judged(d2, tmp_path / "c", _recorded("D2-single-case-tty.stdout.log"), returncode=99)
    assert none_printed.evidence.cases_matched == 0 and needs_attribution(d2.default_step, none_printed)


def test_own_output_puts_the_matched_lines_first_then_the_abort_and_its_named_frames(tmp_path):
    from types import SimpleNamespace

    from kvdiag.engine.run.attribution import own_output

    log = tmp_path / "case.combined.log"
    log.write_text("Testing 2 devices\n\n"
                   "CUDA error: an illegal memory access was encountered\n"
                   "  current device: 0, in function ggml_cuda_op at /src/ggml-cuda.cu:90\n"
                   "  cudaStreamSynchronize(stream)\n"
                   "/src/ggml-cuda.cu:96: CUDA error\n"
                   "/b/libggml-base.so.0(+0x339bb)[0x7f01]\n"
                   "/b/libggml-base.so.0(ggml_abort+0x15b)[0x7f02]\n"
                   "/b/libggml-cuda.so.0(+0x6416a1)[0x7f03]\n"
                   "/b/test-backend-ops(+0xb27b3)[0x5501]\n")
    said = SimpleNamespace(evidence=SimpleNamespace(quoted=("CUDA error", "/src/ggml-cuda.cu:96: CUDA error",
                                                            "Invalid __global__ read of size 4")))
    assert own_output(said, log) == (
        "/src/ggml-cuda.cu:96: CUDA error", "Invalid __global__ read of size 4",
        "CUDA error: an illegal memory access was encountered",
        "  current device: 0, in function ggml_cuda_op at /src/ggml-cuda.cu:90",
        "  cudaStreamSynchronize(stream)",
        "/b/libggml-base.so.0(ggml_abort+0x15b)[0x7f02]")
    log.write_text("".join(f"line {i}\n" for i in range(30)))      # no abort, nothing matched: the tail
    silent = SimpleNamespace(evidence=SimpleNamespace(quoted=()))
    assert own_output(silent, log, n=3) == ("line 27", "line 28", "line 29")
