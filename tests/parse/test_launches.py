"""Kernel instantiations in one spelling: compute-sanitizer's, the launch probe's and the symbol listings'."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.parse.backend_ops import parse_backend_ops
from kvdiag.parse.launches import canonical, distinct_kernels, parse_launches
from kvdiag.parse.symbols import cuobjdump_entries, demangled_kernels, nm_kernels

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYMBOLS = FIXTURES / "symbols"
K44 = "flash_attn_ext_f16<256, 256, 4, 4, false, false>"
TILE = "flash_attn_ext_f16_process_tile<256, 256, 4, 4, 2, false, false, false, true>"


@pytest.mark.parametrize("printed, expected", [
    # compute-sanitizer, as recorded on the H200 (transcripts/ggml-d99724f2-h200/synccheck-single-case.log)
    ("void flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, (bool)0, (bool)0, (bool)0, "
     "(bool)1>(const float2 *, const __half2 *, int)+0x15b50 in fattn-mma-f16.cuh:1538", TILE),
    ("void flash_attn_ext_f16<(int)256, (int)256, (int)4, (int)4, (bool)0, (bool)0>(const char *, long)+0xfbf0", K44),
    # the C++ demangler (c++filt's real output, tests/fixtures/symbols/fattn-standin.cxxfilt.txt)
    ("void flash_attn_ext_f16<256, 256, 4, 4, false, false>(float*, int)", K44),
    ("plain_kernel(float*)", "plain_kernel"),
    # an enum argument stays as both tools print it (the fork's recorded tile instantiations)
    ("void t<(int)256, (ggml_type)1>(int)", "t<256, (ggml_type)1>"),
])
def test_every_spelling_reduces_to_name_and_plain_arguments(printed, expected):
    assert canonical(printed) == expected


def test_launch_lines_are_found_on_their_own_line_and_after_a_case_prefix():
    text = ("kvdiag-launch: void flash_attn_ext_f16<256, 256, 4, 4, false, false>(char const*, int)\n"
            "  FLASH_ATTN_EXT(hsk=256,nb=3): OK\n"
            "  FLASH_ATTN_EXT(hsk=256,nb=4): kvdiag-launch: void k<1>(int)\n"
            "OK\n"
            "kvdiag-launch: void flash_attn_ext_f16<256, 256, 4, 4, false, false>(char const*, int)\n")
    launches = parse_launches(text)
    assert [(x.kernel, x.line_no) for x in launches] == [(K44, 1), ("k<1>", 3), (K44, 5)]
    assert distinct_kernels(launches) == (K44, "k<1>")
    report = parse_backend_ops(text)
    assert [(c.params, c.status) for c in report.cases] == [("hsk=256,nb=3", "OK"), ("hsk=256,nb=4", "OK")]


def test_a_launch_line_may_say_the_shared_memory_it_holds_and_the_kernel_stays_the_same():
    text = ("kvdiag-launch: void flash_attn_ext_f16<256, 256, 4, 4, false, false>(char const*, int)  "
            "[kvdiag-smem 1024+36864]\n"
            "kvdiag-launch: void k_bin_bcast<float>(float const*)  [kvdiag-smem 0+0]\n"
            "kvdiag-launch: unsized_kernel()  [kvdiag-smem ?+128]\n"
            "kvdiag-launch: void k<1>(int)\n"
            "kvdiag-launch: void q<[kvdiag-smem 1+1]>(int)  [kvdiag-smem 7+8] \n"
            "kvdiag-launch: void r<1>(int) [kvdiag-smem 7+x]\n"
            "kvdiag-launch: cublasGemmEx  [kvdiag-smem ?+?]\n")
    launches = parse_launches(text)
    assert [(x.kernel, x.static_smem, x.dynamic_smem, x.shared_memory) for x in launches] == [
        (K44, 1024, 36864, 37888), ("k_bin_bcast<float>", 0, 0, 0), ("unsized_kernel", None, 128, None),
        ("k<1>", None, None, None), ("q<[kvdiag-smem 1+1]>", 7, 8, 15), ("r<1>", None, None, None),
        ("cublasGemmEx", None, None, None)]
    assert launches[0].printed == "void flash_attn_ext_f16<256, 256, 4, 4, false, false>(char const*, int)"
    assert launches[0].to_dict()["static_smem"] == 1024 and "static_smem" not in launches[3].to_dict()
    report = parse_backend_ops(text + "  ADD(type=f32): OK\n")
    assert [(c.params, c.status) for c in report.cases] == [("type=f32", "OK")]


def test_cuobjdump_lists_the_kernels_of_the_fatbin_and_not_the_inlined_tile():
    entries = cuobjdump_entries((SYMBOLS / "fattn-standin.cuobjdump-symbols.txt").read_text())
    assert "_Z18flash_attn_ext_f16ILi256ELi256ELi4ELi4ELb0ELb0EEvPfi" in entries and len(entries) == 6
    kernels = demangled_kernels((SYMBOLS / "fattn-standin.cxxfilt.txt").read_text())
    assert K44 in kernels and not any("process_tile" in k for k in kernels)
    without = demangled_kernels((SYMBOLS / "fattn-standin-without.cxxfilt.txt").read_text())
    assert K44 not in without and len(without) == 5


def test_cuobjdump_13_0_on_the_h200_spells_a_kernel_stt_func_sto_entry():
    """cuobjdump 13.0 (CUDA 13.0 on the H200) writes `STT_FUNC STB_LOCAL STO_ENTRY name`, 13.5 (the wheel
    above) `FUNC GLOBAL DEFAULT ENTRY name`: the real listing of a llama.cpp 749f688fc libggml-cuda.so built
    there with probes/D2-without-mma-kernels.patch (its first version) holds 16 flash_attn_ext_f16 kernels,
    all of them the 192/128 and 576/512 instantiations that fattn.cu still instantiated itself."""
    import gzip
    text = gzip.decompress((FIXTURES / "device" / "h200-session7" / "na-cuobjdump-symbols.stdout.log.gz")
                           .read_bytes()).decode()
    entries = cuobjdump_entries(text)
    assert len(entries) == 5894 == len({line.split()[-1] for line in text.splitlines() if " STO_ENTRY " in line})
    fattn = [e for e in entries if e.startswith("_Z18flash_attn_ext_f16I")]
    assert len(fattn) == 16
    assert "_Z18flash_attn_ext_f16ILi576ELi512ELi2ELi4ELb0ELb1EEvPKcS1_S1_S1_S1_PKiPfP6float2ffffjfi5uint3iiiiiiiiiiil" \
           "iiliiiiil" in fattn
    assert all(e.startswith(("_Z18flash_attn_ext_f16ILi192ELi128E", "_Z18flash_attn_ext_f16ILi576ELi512E")) for e in fattn)
    assert not any("STB_WEAK" in e or e.startswith("$") for e in entries)


def test_nm_sees_the_host_launch_stubs_without_nvccs_wrappers():
    kernels = nm_kernels((SYMBOLS / "fattn-standin.nm-C.txt").read_text())
    assert K44 in kernels and "flash_attn_stream_k_fixup<256, 4, 4>" in kernels
    assert not any("stub" in k or "guard" in k for k in kernels)
    assert K44 not in nm_kernels((SYMBOLS / "fattn-standin-without.nm-C.txt").read_text())
