"""compute-sanitizer parser against recorded H200 output and hand-written fixtures.

The recorded numbers (2048/2028/20, 256 in two instantiations, block 52, the
1538/1878 lines) are the facts kvdiag's FA signature is built on; asserting them
exactly keeps the parser honest when it changes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvdiag.parse.sanitizer import (
    HOST_API_KIND,
    Frame,
    RacecheckSummary,
    instantiations,
    parse_sanitizer,
    parse_sanitizer_lines,
    parse_site,
    site_label,
    split_signature,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

TILE_4x4 = (
    "flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, "
    "(bool)0, (bool)0, (bool)0, (bool)1>"
)
KERNEL_4x4 = "flash_attn_ext_f16<(int)256, (int)256, (int)4, (int)4, (bool)0, (bool)0>"
TILE_8x1_A = (
    "flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)8, (int)1, (int)2, "
    "(bool)0, (bool)0, (bool)0, (bool)1>"
)
TILE_8x1_B = (
    "flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)8, (int)1, (int)2, "
    "(bool)0, (bool)0, (bool)1, (bool)0>"
)
KERNEL_8x1 = "flash_attn_ext_f16<(int)256, (int)256, (int)8, (int)1, (bool)0, (bool)0>"
DIVERGENT = "Barrier error detected. Divergent thread(s) in block."


def read(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


def parse(*parts: str, tool: str | None = None):
    return parse_sanitizer(read(*parts), tool=tool)


# ------------------------------------------------------------ recorded: synccheck


@pytest.fixture(scope="module")
def single():
    return parse("transcripts", "synccheck-single-case.log")


def test_single_case_counts(single):
    assert single.tool == "synccheck"
    assert single.error_count == 2048
    assert single.not_printed == 2028
    assert single.printed_count == 20
    assert single.count_for("barrier-divergence") == 20
    assert single.count_for("invalid-write") == 0
    assert single.has_summary is True
    assert single.is_clean is False


def test_single_case_status_lines(single):
    assert single.banner is True
    assert single.target_error is True
    assert single.process_failed is True
    assert single.tool_errors == ()
    assert single.summary_lines == (
        "ERROR SUMMARY: 2048 errors",
        "ERROR SUMMARY: 2028 errors were not printed. Use --print-limit option to adjust the number of printed errors",
    )


def test_single_case_one_site(single):
    assert len(single.sites) == 1
    site = single.sites[0]
    assert site_label(site) == "fattn-mma-f16.cuh:1538"
    assert (site.file, site.line, site.count, site.blocks) == ("fattn-mma-f16.cuh", 1538, 20, 1)
    assert site.kind == "barrier-divergence"
    assert site.kernel_name == "flash_attn_ext_f16_process_tile"
    assert site.template_args[:5] == ("(int)256", "(int)256", "(int)4", "(int)4", "(int)2")
    assert site.first is single.findings[0]


def test_single_case_first_finding(single):
    f = single.findings[0]
    assert f.tool == "synccheck"
    assert f.message == DIVERGENT
    assert f.kernel.startswith("void flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2,")
    assert f.kernel.endswith("int, int, int, int, int, int, int, int, int, int, int, int)")
    assert f.template_args == (
        "(int)256", "(int)256", "(int)4", "(int)4", "(int)2", "(bool)0", "(bool)0", "(bool)0", "(bool)1",
    )
    assert f.instantiation == TILE_4x4
    assert (f.file, f.line, f.offset) == ("fattn-mma-f16.cuh", 1538, "+0x15b50")
    assert (f.thread, f.block) == ((0, 0, 0), (52, 0, 0))
    assert f.line_no == 4
    assert len(f.raw_lines) == 4


def test_single_case_device_frame(single):
    frame = single.findings[0].device_frames[0]
    assert len(single.findings[0].device_frames) == 1
    assert (frame.file, frame.line, frame.offset) == ("fattn-mma-f16.cuh", 1878, "+0xfbf0")
    assert frame.kernel_name == "flash_attn_ext_f16"
    assert frame.instantiation == KERNEL_4x4


def test_single_case_threads_and_blocks(single):
    assert [f.thread for f in single.findings] == [(i, 0, 0) for i in range(20)]
    assert {f.block for f in single.findings} == {(52, 0, 0)}


def test_single_case_instantiations(single):
    assert instantiations(single) == (TILE_4x4, KERNEL_4x4)
    assert instantiations(single, include_frames=False) == (TILE_4x4,)


@pytest.fixture(scope="module")
def sweep():
    return parse("transcripts", "synccheck-hsk256-sweep.log")


def test_sweep_counts(sweep):
    assert sweep.tool == "synccheck"
    assert sweep.error_count == 256
    assert sweep.not_printed is None
    assert sweep.printed_count == 256
    assert sweep.target_error is True
    assert sweep.process_failed is True


def test_sweep_first_header_found_mid_line(sweep):
    first = sweep.findings[0]
    assert first.line_no == 21  # the 12th case line carries the first marker
    assert first.message == DIVERGENT
    assert first.raw_lines[0] == DIVERGENT
    assert (first.thread, first.block) == ((0, 0, 0), (0, 0, 0))


def test_sweep_two_instantiations(sweep):
    assert instantiations(sweep, include_frames=False) == (TILE_8x1_A, TILE_8x1_B)
    assert instantiations(sweep) == (TILE_8x1_A, KERNEL_8x1, TILE_8x1_B)


def test_sweep_sites(sweep):
    assert [(s.count, s.blocks, s.line) for s in sweep.sites] == [(128, 4, 1538), (128, 4, 1538)]
    assert [s.first.instantiation for s in sweep.sites] == [TILE_8x1_A, TILE_8x1_B]
    assert {f.block for f in sweep.findings} == {(b, 0, 0) for b in range(8)}
    frames = {(fr.file, fr.line) for f in sweep.findings for fr in f.device_frames}
    assert frames == {("fattn-mma-f16.cuh", 1878), ("fattn-mma-f16.cuh", 1837)}


def test_sweep_streamed_equals_whole(sweep):
    with FIXTURES.joinpath("transcripts", "synccheck-hsk256-sweep.log").open() as fh:
        streamed = parse_sanitizer_lines(fh)
    assert streamed == sweep


# --------------------------------------------------- recorded: memcheck, racecheck


def test_memcheck_clean():
    text = read("transcripts", "memcheck-single-case.log")
    report = parse_sanitizer(text, tool="memcheck")
    assert report.tool == "memcheck"
    assert (report.error_count, report.not_printed, report.printed_count) == (0, None, 0)
    assert report.has_summary and report.is_clean
    assert report.target_error is False and report.process_failed is False
    # a clean memcheck log does not say which tool wrote it
    assert parse_sanitizer(text).tool is None


def test_racecheck_clean():
    report = parse("transcripts", "racecheck-single-case.log")
    assert report.tool == "racecheck"
    assert report.racecheck == RacecheckSummary(hazards=0, errors=0, warnings=0)
    assert report.error_count is None
    assert report.has_summary and report.is_clean
    assert report.summary_lines == ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",)


# ------------------------------------------------------------- hand-written formats


@pytest.fixture(scope="module")
def memcheck():
    return parse("sanitizer", "memcheck-invalid-write.log")


def test_memcheck_kinds(memcheck):
    assert memcheck.tool == "memcheck"
    assert [f.kind for f in memcheck.findings] == ["invalid-write", "invalid-write", "misaligned-access", "api-error"]
    assert {f.tool for f in memcheck.findings} == {"memcheck"}
    assert memcheck.error_count == 4
    assert memcheck.count_for("invalid-write") == 2


def test_memcheck_invalid_write_block(memcheck):
    f = memcheck.findings[0]
    assert f.message == "Invalid __global__ write of size 4 bytes"
    assert (f.kernel_name, f.template_args) == ("k_set_rows", ("float", "float"))
    assert (f.file, f.line, f.offset) == ("set-rows.cu", 12, "+0x70")
    assert (f.thread, f.block) == ((32, 0, 0), (0, 0, 0))
    assert f.detail == (
        "Address 0x7f3c2a000080 is out of bounds "
        "and is 4 bytes after the nearest allocation at 0x7f3c2a000000 of size 128 bytes"
    )
    assert f.host_frames == (
        "[0x2dfbef] in libcuda.so.1",
        "cudaLaunchKernel [0x75230] in libcudart.so.13",
        "ggml_cuda_op_set_rows(ggml_backend_cuda_context&, ggml_tensor*) [0x1b2c40] in libggml-cuda.so.0",
    )
    assert memcheck.findings[1].host_frames == ("[0x2dfbef] in /usr/lib/x86_64-linux-gnu/libcuda.so.1",)


def test_memcheck_interleaved_and_misaligned(memcheck):
    f = memcheck.findings[2]
    assert f.message == "Invalid __global__ read of size 16 bytes"
    assert (f.kernel_name, f.file, f.line) == ("k_get_rows_float", "getrows.cu", 87)
    assert (f.thread, f.block) == ((3, 0, 0), (1, 0, 0))  # line carried program output first


def test_memcheck_api_error_and_sites(memcheck):
    api = memcheck.findings[3]
    assert api.message.startswith('Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure"')
    assert api.kernel is None and api.file is None
    assert [(s.kind, s.count) for s in memcheck.sites] == [
        ("invalid-write", 2), ("misaligned-access", 1), ("api-error", 1),
    ]
    assert memcheck.target_error and memcheck.process_failed


def test_without_lineinfo():
    report = parse("sanitizer", "synccheck-nolineinfo.log")
    assert (report.error_count, report.not_printed, report.printed_count) == (512, 509, 3)
    assert {(f.file, f.line) for f in report.findings} == {(None, None)}
    assert [f.offset for f in report.findings] == ["+0x15b50", "+0x15b50", "+0x15c10"]
    assert report.findings[0].kernel_name == "flash_attn_ext_f16_process_tile"
    assert [(site_label(s), s.count, s.blocks) for s in report.sites] == [("+0x15b50", 2, 1), ("+0x15c10", 1, 1)]
    frame = report.findings[0].device_frames[0]
    assert (frame.file, frame.line, frame.offset, frame.kernel_name) == (None, None, "+0xfbf0", "flash_attn_ext_f16")
    assert instantiations(report) == (TILE_4x4, KERNEL_4x4)


def test_legacy_format_without_period(single):
    report = parse("sanitizer", "synccheck-legacy-noperiod.log")
    assert report.tool == "synccheck"
    assert [f.kind for f in report.findings] == ["barrier-divergence"] * 3
    first, second, third = report.findings
    assert first.message == "Barrier error detected. Divergent thread(s) in block"
    assert first.message_key == single.findings[0].message_key
    assert (first.kernel, first.file, first.line, first.offset) == (None, "fattn-mma-f16.cuh", 1538, "0x15b50")
    assert second.file == "/src/ggml/src/ggml-cuda/fattn-mma-f16.cuh"
    assert (second.line, second.instantiation) == (1538, TILE_4x4)
    assert third.message == "Barrier error detected. Divergent thread(s) in warp"
    assert (third.kernel_name, third.template_args) == ("mul_mat_q", ("(ggml_type)8", "(int)64", "(bool)0"))
    assert (third.thread, third.block) == ((5, 1, 0), (3, 0, 0))
    assert report.error_count == 3


def test_racecheck_new_format():
    report = parse("sanitizer", "racecheck-hazards.log")
    assert report.tool == "racecheck"
    assert report.racecheck == RacecheckSummary(hazards=2, errors=1, warnings=1)
    assert report.error_count is None and report.has_summary and not report.is_clean
    err, warn = report.findings
    assert (err.kind, err.severity, err.hazards) == ("race-hazard", "error", 32)
    assert (warn.kind, warn.severity, warn.hazards) == ("race-hazard", "warning", 2)
    assert (err.kernel_name, err.template_args) == ("soft_max_f32", ("(bool)1", "(int)0", "(int)0", "__half"))
    assert (err.file, err.line, err.offset) == ("softmax.cu", 151, "+0x8d0")
    assert [(p.file, p.line, p.offset) for p in err.peers] == [("softmax.cu", 160, "+0x940")]
    assert [(p.line, p.offset) for p in warn.peers] == [(170, "+0x9f0")]
    assert err.message.startswith("Error: Race reported between Write access at void soft_max_f32<")


def test_racecheck_legacy_hazard():
    report = parse("sanitizer", "racecheck-legacy-hazard.log")
    assert report.banner is True
    assert report.racecheck == RacecheckSummary(hazards=1, errors=1, warnings=0)
    (f,) = report.findings
    assert (f.kind, f.severity, f.tool) == ("race-hazard", "error", "racecheck")
    assert (f.block, f.thread) == ((0, 0, 0), (31, 0, 0))
    assert (f.file, f.line, f.kernel_name, f.offset) == ("raceWAW.cu", 18, "WAW", "0x000000b8")
    assert [(p.file, p.line) for p in f.peers] == [("raceWAW.cu", 18)]


def test_initcheck():
    report = parse("sanitizer", "initcheck-uninit-read.log")
    assert report.tool == "initcheck"
    (f,) = report.findings
    assert (f.kind, f.tool) == ("uninitialized-access", "initcheck")
    assert f.message == "Uninitialized __global__ memory read of size 4 bytes"
    assert (f.kernel_name, f.template_args) == ("k_bin_bcast", ("&op_add", "float", "float", "float"))
    assert (f.file, f.line, f.thread) == ("binbcast.cu", 42, (5, 0, 0))
    assert f.detail == "Address 0x7f8e1a000014"
    assert report.error_count == 1


def test_tool_errors():
    report = parse("sanitizer", "tool-error.log")
    assert report.tool_errors == (
        "Error: Target application terminated before first instrumented API call",
        "Error: unable to initialize the CUDA driver (is the NVIDIA kernel module loaded?)",
    )
    assert report.findings == ()
    assert report.has_summary is False and report.is_clean is False


def test_explicit_tool_overrides_detection():
    report = parse("sanitizer", "synccheck-legacy-noperiod.log", tool="synccheck")
    assert {f.tool for f in report.findings} == {"synccheck"}
    with pytest.raises(ValueError):
        parse_sanitizer("", tool="helgrind")


# ----------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n\n",
        "random words\nOK\n\x00\x01\x02 binary junk \xff",
        "==========================\n== not the marker ==\n===========\n",
        "=========\n=========    at nowhere\n=========     by thread (x,y,z)\n",
        "ERROR SUMMARY: 5 errors (no marker, so not the tool's)",
    ],
)
def test_garbage_gives_empty_report(text):
    report = parse_sanitizer(text)
    assert report.tool is None
    assert report.findings == () and report.sites == ()
    assert report.error_count is None and report.not_printed is None
    assert report.has_summary is False and report.is_clean is False
    assert report.tool_errors == () and report.summary_lines == ()
    json.dumps(report.to_dict())


def test_truncated_log_keeps_the_open_block():
    report = parse_sanitizer("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size")
    (f,) = report.findings
    assert (f.kind, f.tool, f.kernel, f.file, f.line, f.thread) == ("invalid-write", "memcheck", None, None, None, None)
    assert report.has_summary is False


def test_ansi_colour_codes_are_ignored():
    text = "\x1b[1;31m========= ERROR SUMMARY: 3 errors\x1b[0m\n"
    assert parse_sanitizer(text).error_count == 3


def test_to_dict_is_json(single):
    data = json.loads(json.dumps(single.to_dict()))
    assert data["error_count"] == 2048
    assert data["printed_count"] == 20
    assert data["sites"][0]["line"] == 1538
    assert data["findings"][0]["block"] == [52, 0, 0]
    assert data["findings"][0]["instantiation"] == TILE_4x4
    assert data["findings"][0]["device_frames"][0]["line"] == 1878


def test_results_are_frozen(single):
    with pytest.raises(dataclasses.FrozenInstanceError):
        single.error_count = 0  # type: ignore[misc]
    assert isinstance(single.findings, tuple) and isinstance(single.findings[0].device_frames, tuple)


# ----------------------------------------------------------------- signatures


def test_split_signature():
    assert split_signature("void k<(int)1, (bool)0>(float *, int)") == ("k", ("(int)1", "(bool)0"))
    assert split_signature("plain_kernel(int *)") == ("plain_kernel", ())
    assert split_signature("void ns::k<A<int, 2>, (int)3>(A<int, 2>)") == ("ns::k", ("A<int, 2>", "(int)3"))
    assert split_signature("void (anonymous namespace)::k<(int)4>(int)") == (
        "(anonymous namespace)::k",
        ("(int)4",),
    )
    assert split_signature("") == ("", ())


@pytest.mark.parametrize("signature, expected", [
    # racecheck on an H100 (device session 17): a warning's site inside cuda_fp16.hpp
    ("__half2::operator =(const __half2&&)", ("__half2::operator=", ())),
    ("void functor::operator()(int)", ("functor::operator()", ())),
    ("void ns::S::operator<<(int)", ("ns::S::operator<<", ())),
    ("bool operator<(const a&, const b&)", ("operator<", ())),
    ("void cmp::operator< <(int)3>(int)", ("cmp::operator<", ("(int)3",))),
    ("operator new(unsigned long)", ("operator new", ())),
    ("__half::operator float() const", ("__half::operator float", ())),
    ("void ns::operator_helper<(int)2>(int)", ("ns::operator_helper", ("(int)2",))),
    ("void (anonymous namespace)::S::operator()(int)", ("(anonymous namespace)::S::operator()", ())),
])
def test_split_signature_names_operators_whole(signature, expected):
    """An operator's name holds a space or the brackets that end other names; it was read as "=" before."""
    assert split_signature(signature) == expected


def test_parse_site_forms():
    assert parse_site("k(int *)+0x70 in f.cu:12") == Frame("k(int *)", "k", "f.cu", 12, "+0x70")
    assert parse_site("k(int *)+0x70") == Frame("k(int *)", "k", None, None, "+0x70")
    assert parse_site("0x15b50 in fattn-mma-f16.cuh:1538") == Frame("", None, "fattn-mma-f16.cuh", 1538, "0x15b50")
    assert parse_site("0xc8 in a/b.cuh:75:void v<double>(double*, int)") == Frame(
        "void v<double>(double*, int)", "v", "a/b.cuh", 75, "0xc8", ("double",)
    )


def test_a_race_record_with_several_writes_stands_for_the_hazards_of_every_write():
    """Recorded on an H100 (device session 20): a FLASH_ATTN_EXT read racing with six writes, one line each."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-session20" / "fp16-race.log"
    findings = parse_sanitizer(path.read_text(), "racecheck").findings
    assert [f.hazards for f in findings] == [4096 + 4032 + 3840 + 31744 + 31552 + 32512,
                                             4288 + 4096 + 4032 + 30784 + 31744 + 31552]
    assert [len(f.peers) for f in findings] == [6, 6]
    assert {(p.file, p.line) for f in findings for p in f.peers} == {("cuda_fp16.hpp", 264)}


def test_a_host_api_record_is_a_finding_without_a_kernel_named_by_its_call():
    """Recorded on an H100 (device session 21): GET_ROWS type=i32 in test mode under initcheck, no print limit.
    test-backend-ops reads back a tensor it set only in part: 608 host API records beside the kernel's 1020."""
    import gzip

    path = FIXTURES / "device" / "h100-session21" / "limit0.log.gz"
    report = parse_sanitizer(gzip.open(path, "rt").read(), "initcheck")
    assert report.error_count == len(report.findings) == 1628
    host = [f for f in report.findings if f.kind == HOST_API_KIND]
    assert len(host) == 608 and all(f.kernel is None and f.file is None for f in host)
    assert host[0].message.startswith("Host API memory access error at host access to 0x")
    assert host[0].detail.startswith("Uninitialized access to 0x") and host[0].detail.endswith("cudaMemcpy source")
    assert [(site_label(s), s.count) for s in report.sites] == [("getrows.cu:99", 1020),
                                                                 ("host API (cudaMemcpy source)", 608)]


def test_a_host_api_record_without_its_detail_line_is_labelled_host_api():
    log = ("========= Host API memory access error at host access to 0x7f0000001000 of size 64 bytes\n"
           "=========\n========= ERROR SUMMARY: 1 error\n")
    (site,) = parse_sanitizer(log, "memcheck").sites
    assert site.kind == HOST_API_KIND and site_label(site) == "host API"


def test_a_host_api_label_stays_short_whatever_the_line():
    log = ("========= Host API memory access error at host access to 0x7f0000001000 of size 64 bytes\n"
           "=========     Uninitialized access to 0x7f0000001000 on access by " + "x" * 100_000 + "\n"
           "=========\n========= ERROR SUMMARY: 1 error\n")
    (site,) = parse_sanitizer(log, "initcheck").sites
    assert site_label(site) == "host API (" + "x" * 80 + ")"
