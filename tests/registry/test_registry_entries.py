"""The real registry: it loads, and its entries say what the defects need them to say.

The facts checked here come from the seeds and from ggml d99724f2 (its
test-backend-ops case list and a recorded full FLASH_ATTN_EXT run on an H200).
An edit that changes one of them has to change the test too, on purpose.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from kvdiag.engine.verdict.planning import render_step, template_context
from kvdiag.registry.loader import load_registry

IDS = [f"D{n}" for n in range(1, 24)]

# id -> (default step kind, signature matcher types in order)
DEFAULT_KIND_AND_SIGNATURE = {
    "D1": ("backend-ops", ["abort", "output"]),
    "D2": ("backend-ops", ["sanitizer"]),
    "D3": ("server", ["abort", "output"]),
    "D4": ("command", ["abort", "output"]),
    "D5": ("server", ["relative"]),
    "D6": ("backend-ops", ["abort", "output"]),
    "D7": ("compile", ["output"]),
    "D8": ("backend-ops", ["case"]),
    "D9": ("server", ["output"]),
    "D10": ("command", ["output", "output"]),
    "D11": ("backend-ops", ["abort", "output"]),
    "D12": ("command", ["exit"]),
    "D13": ("build-check", ["stale"]),
    "D14": ("backend-ops", ["sanitizer"]),
    "D15": ("backend-ops", ["sanitizer"]),
    "D16": ("backend-ops", ["sanitizer"]),
    "D17": ("backend-ops", ["sanitizer"]),
    "D18": ("backend-ops", ["sanitizer"]),
    "D19": ("backend-ops", ["sanitizer"]),
    "D20": ("backend-ops", ["sanitizer"]),
    "D21": ("backend-ops", ["sanitizer"]),
    "D22": ("backend-ops", ["sanitizer"]),
    "D23": ("backend-ops", ["sanitizer"]),
}

BACKEND_OPS_ARGV = ("{{ bin['test-backend-ops'] }}", "test", "-o", "{{ op }}", "-b", "{{ backend }}", "-p", "{{ params }}")

# Entries that only a BeeLlama build can have: each must carry a condition upstream fails.
FORK_ONLY = ("D4", "D5", "D7", "D9", "D10")

BODY_SECTIONS = ("Root cause", "Trigger", "Established", "Not established")


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def entries(registry):
    return {e.id: e for e in registry.entries}


def fa_case_strings(transcripts_dir: Path) -> list[str]:
    """The parameter strings of every FLASH_ATTN_EXT case ggml d99724f2 prints on an H200."""
    log = transcripts_dir / "test-backend-ops-fa-all-nosanitizer.log.gz"
    text = gzip.decompress(log.read_bytes()).decode("utf-8", "replace")
    return re.findall(r"FLASH_ATTN_EXT\((.*?)\): ", text)


def fa_case_statuses(transcripts_dir: Path) -> dict[str, str]:
    log = transcripts_dir / "test-backend-ops-fa-all-nosanitizer.log.gz"
    text = re.sub(r"\x1b\[[0-9;]*m", "", gzip.decompress(log.read_bytes()).decode("utf-8", "replace"))
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"FLASH_ATTN_EXT\((.*?)\): (.*)", text)}


def concat_case_strings() -> list[str]:
    """CONCAT parameter strings as ggml d99724f2's test-backend-ops builds them."""
    out = [f"type={t},ne_a=[11,12,13,14],ne_b_d=7,dim={dim},v={v}"
           for v in range(4) for dim in range(4)
           for t in ("f32", "f16", "bf16", "i8", "i16", "i32", "i64")]
    out += [f"type={t},ne_a=[128,12,13,14],ne_b_d={256 if dim == 0 else 7},dim={dim},v={v}"
            for t in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0") for v in (0, 4, 8, 12) for dim in range(4)]
    return out


# --------------------------------------------------------------------------- loading

def test_registry_loads_twenty_three_entries_without_problems(registry):
    assert [str(p) for p in registry.problems] == []
    assert [e.id for e in registry.entries] == IDS


def test_example_template_is_not_loaded(registry, registry_dir):
    assert (registry_dir / "EXAMPLE.md").is_file()
    assert all(e.path.name != "EXAMPLE.md" for e in registry.entries)


@pytest.mark.parametrize("entry_id", IDS)
def test_default_step_kind_and_signature_types(entries, entry_id):
    kind, types = DEFAULT_KIND_AND_SIGNATURE[entry_id]
    entry = entries[entry_id]
    assert entry.default_step.kind == kind
    from kvdiag.engine.verdict.judge import matchers_for

    assert [m.type for m in matchers_for(entry, entry.default_step.name)] == types


@pytest.mark.parametrize("entry_id", IDS)
def test_body_has_the_conventional_sections(entries, entry_id):
    entry = entries[entry_id]
    for heading in BODY_SECTIONS:
        assert entry.section(heading), f"{entry_id} has no '## {heading}' text"


@pytest.mark.parametrize("entry_id", IDS)
def test_entry_holds_no_absolute_path_of_a_machine(registry_dir, entry_id):
    text = (registry_dir / f"{entry_id}.md").read_text(encoding="utf-8")
    assert not re.search(r"(?<![\w.])/(work|home|root|tmp|mnt|Users)/", text)


# --------------------------------------------------------------------------- steps

def test_every_backend_ops_step_uses_the_shared_argv_form(entries):
    steps = [(e.id, s) for e in entries.values() for s in e.steps if s.kind == "backend-ops"]
    assert len(steps) >= 8
    for entry_id, step in steps:
        assert step.argv == BACKEND_OPS_ARGV, (entry_id, step.name)
        assert set(step.vars) >= {"op", "params"}, (entry_id, step.name)


@pytest.mark.parametrize("entry_id", IDS)
def test_every_step_renders_with_a_complete_context(entries, entry_id, tmp_path):
    entry = entries[entry_id]
    for step in entry.steps:
        needed = step.requires_binaries if step.requires_binaries is not None else entry.requires.binaries
        binaries = {name: tmp_path / "build" / "bin" / name for name in needed}
        if step.kind in ("build-check", "compile"):
            assert not step.command_templates
            continue
        ctx = template_context(entry, step, binaries=binaries, build_dir=tmp_path / "build",
                               source_dir=tmp_path / "src", scratch=tmp_path / "scratch",
                               environ={"LLAMA_KV_MODEL": str(tmp_path / "model.gguf")})
        planned = render_step(step, ctx)
        assert planned.commands
        for command in planned.commands:
            assert all(arg and "{{" not in arg and arg != "None" for arg in command), command
        assert step.timeout > 0 and step.expected_seconds and step.expected_seconds < step.timeout


@pytest.mark.parametrize("entry_id", FORK_ONLY)
def test_fork_only_entries_are_not_applicable_upstream(entries, entry_id):
    applies = entries[entry_id].applies
    assert applies.cmake_options or applies.source_paths or applies.tests
    assert "GGML_CUDA_KVARN" in applies.cmake_options or any(
        "merge-keepers" in p for p in (*applies.source_paths, *applies.tests))


def test_d1_runs_hsk320_bare_and_records_the_arch(entries):
    d1 = entries["D1"]
    step = d1.default_step
    assert step.vars["params"] == "hsk=320" and step.sanitizer is None
    assert d1.applies.cc_min is None and d1.applies.cc_max is None
    abort, output = d1.signature
    assert abort.kind == "ggml-abort"
    assert re.search(output.pattern, "/src/ggml/src/ggml-cuda/fattn.cu:412: fatal error")


def test_d3_runs_ten_times_on_a_model_and_stays_apart_from_d2(entries):
    d3 = entries["D3"]
    step = d3.default_step
    assert step.runs == 10
    assert d3.requires.env == ("LLAMA_KV_MODEL",) and d3.requires.binaries == ("llama-server",)
    assert {"-nkvo", "{{ env.LLAMA_KV_MODEL }}", "-fa"} <= set(step.argv)
    abort, output = d3.signature
    assert abort.kind == "cuda-error"
    assert re.search(abort.message, "CUDA error: an illegal memory access was encountered")
    assert re.search(output.pattern, "  current device: 0, in function ggml_backend_cuda_synchronize at x.cu:1")
    assert "D2" in d3.related and "D3" in entries["D2"].related
    assert "correlat" in d3.section("Not established")


def test_d12_probe_proves_the_exception_path_and_wants_sigill(entries):
    d12 = entries["D12"]
    step = d12.default_step
    # a params filter that is not a regex: std::regex throws in every test-backend-ops since 2024
    assert step.argv[-2:] == ("-p", "(") and "-b" in step.argv
    assert re.search(step.expect[0], "  what():  Mismatched '(' and ')' in regular expression")
    assert re.search(step.expect[0], "  what():  Unable to read test file")      # the first probe's logs
    assert not re.search(step.expect[0], "  what():  ")
    (exit_matcher,) = d12.signature
    assert exit_matcher.signal == "SIGILL"


def test_d13_is_a_build_check_with_a_stale_signature(entries):
    d13 = entries["D13"]
    assert [s.kind for s in d13.steps] == ["build-check"]
    assert "bug-167" in d13.body and "bad_array_new_length" in d13.body


# --------------------------------------------------------------------------- regexes against real text

def test_params_regexes_select_the_expected_upstream_fa_cases(entries, transcripts_dir):
    cases = fa_case_strings(transcripts_dir)
    assert len(cases) == 5158

    def selected(entry_id: str, step: str | None = None) -> list[str]:
        s = entries[entry_id].step(step) if step else entries[entry_id].default_step
        return [c for c in cases if re.search(s.vars["params"], c)]

    assert len(selected("D1")) == 257
    assert len(selected("D2")) == 1
    # upstream's one quantized softcap case (hsk=256, q8_0, softcap 30): D6 runs it, one case wide
    d6 = selected("D6")
    assert len(d6) == 1 and "type_K=q8_0" in d6[0] and "logit_softcap=30" in d6[0]
    assert len(selected("D6", "softcap-all")) == 241
    # no q2_0s upstream, and the q2_0 cases that exist must not match: not-applicable
    assert selected("D8") == []
    assert any("type_K=q2_0," in c for c in cases)
    assert [c for c in cases if re.search(entries["D8"].drift.params, c)] == []
    # ... while the fork's case, and only a q2_0s one, would be selected
    fork_case = "hsk=64,hsv=64,nh=4,nr23=[1,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000," \
                "logit_softcap=0.000000,prec=f32,type_K={t},type_V={t},permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0"
    for regex in (entries["D8"].default_step.vars["params"], entries["D8"].drift.params):
        assert re.search(regex, fork_case.format(t="q2_0s"))
        assert not re.search(regex, fork_case.format(t="q2_0"))


def test_upstream_ran_the_cases_d1_and_d6_select_without_failure(entries, transcripts_dir):
    statuses = fa_case_statuses(transcripts_dir)
    d1 = [st for c, st in statuses.items() if re.search(entries["D1"].default_step.vars["params"], c)]
    assert d1.count("OK") == 17 and d1.count("not supported [CUDA0]") == 240
    d6 = [st for c, st in statuses.items() if re.search(entries["D6"].default_step.vars["params"], c)]
    assert d6 == ["OK"]


def test_d11_selects_exactly_the_sixteen_f16_concat_cases(entries):
    step = entries["D11"].default_step
    assert step.vars["op"] == "CONCAT"
    chosen = [c for c in concat_case_strings() if re.search(step.vars["params"], c)]
    assert len(chosen) == 16 and all(c.startswith("type=f16,") for c in chosen)


@pytest.mark.parametrize("entry_id, line, should_match", [
    ("D4", "op not supported (view) (KVARN_STORE)", True),
    ("D7", 'fattn-mma-kvarn-case.cuh(178): error: no instance of function template '
           '"flash_attn_ext_f16_process_tile" matches the argument list', True),
    ("D10", "\t  1 - test-upstream-merge-keepers-static (Failed)", True),
    ("D10", "\t  1 - test-upstream-merge-keepers-static (Not Run)", False),
])
def test_output_patterns_against_real_lines(entries, entry_id, line, should_match):
    patterns = [m.pattern for m in entries[entry_id].signature if m.type == "output"]
    assert patterns
    assert bool(re.search(patterns[0], line)) is should_match


def test_d5_compares_the_host_compute_buffer_with_its_q8_0_arm(entries):
    (relative,) = entries["D5"].signature
    assert (relative.step, relative.arm, relative.ratio_min, relative.pick) == ("kvarn5", "q8_0-control", 50, "max")
    assert entries["D5"].step("kvarn5").compare_with == "q8_0-control"
    host = re.compile(relative.pattern)
    assert host.search("sched_reserve:  CUDA_Host compute buffer size =    20.28 MiB").group("value") == "20.28"
    assert host.search("sched_reserve:        CPU compute buffer size =    21.78 MiB").group("value") == "21.78"
    assert host.search("sched_reserve:      CUDA0 compute buffer size =  2195.90 MiB") is None


def test_d8_case_signature_and_drift(entries):
    d8 = entries["D8"]
    (case,) = d8.signature
    assert (case.status, case.metric, case.min_value) == ("FAIL", "ERR", 1.0)
    assert d8.drift.seeds == ("0", "1", "42") and d8.drift.runs == 3
    assert d8.drift.confirm_min_fails == 1 and d8.drift.confirm_min_err == 1.0
