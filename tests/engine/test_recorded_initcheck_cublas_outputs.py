"""Two initcheck roots of device session 21 read, in full, buffers that a cuBLAS GEMM had just written.

`convert.cu:437` (MUL_MAT, `convert_unary<__half, float>`) converts the F16 output of
`cublasGemmStridedBatchedEx` to F32; `getrows.cu:127` (MUL_MAT_ID, `k_get_rows_float_vec<float>`) gathers
the per-expert GEMMs' F32 outputs back into token order (ggml-cuda.cu at d99724f2). The records say every
element of those outputs was read uninitialized, yet the same cases pass the numeric test in test mode on
the same tree and the same kind of GPU (device sessions 17 and 20): the values were written, by stores
initcheck did not record. So neither root is a defect of ggml's kernels; performance.md says what is left
to prove on a device. These tests keep those statements true to the records.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvdiag.parse.case_segments import split_cases
from kvdiag.parse.text import strip_ansi

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recorded_h100_session18_discover import read_gz  # noqa: E402

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
MUL_MAT_CASE = "type_a=f16,type_b=f32,m=16,n=8,k=1024,bs=[3,2],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0"
MUL_MAT_ID_CASE = "type_a=bf16,type_b=f32,n_mats=16,n_used=16,b=0,m=32,n=1024,k=16"

# (process log, case, site, bytes per read, the output's size in bytes: its elements times the element size)
ROOTS = [
    ("initcheck-00486", MUL_MAT_CASE, "convert.cu:437", 2, 16 * 8 * (3 * 2) * 2),        # m*n*batches halves
    ("initcheck-00370", MUL_MAT_ID_CASE, "getrows.cu:127", 16, 32 * (1024 * 16) * 4),   # m*(tokens*used) floats
]


def addresses(raw_lines: tuple[str, ...]) -> list[int]:
    return [int(m.group(1), 16) for line in raw_lines if (m := re.search(r"Address (0x[0-9a-f]+)", line))]


@pytest.mark.parametrize(("process", "case", "site", "size", "output_bytes"), ROOTS)
def test_the_root_reads_every_byte_of_the_gemm_output_once(process, case, site, size, output_bytes):
    text = strip_ansi(read_gz(DEVICE / "h100-session21" / "logs" / "whole" / f"{process}.stdout.log.gz"))
    segment = split_cases(text, "initcheck").segment(case)
    assert segment is not None
    at_site = [f for f in segment.findings if f"{f.file}:{f.line}" == site]
    assert at_site and all(f"read of size {size} bytes" in f.message for f in at_site)
    spots = sorted(a for f in at_site for a in addresses(f.raw_lines))
    assert len(spots) == len(set(spots)) == output_bytes // size               # each element once
    assert spots[-1] + size - spots[0] == output_bytes                         # one contiguous buffer


def _test_mode_status(fixture: str, tool: str, op: str, case: str) -> str:
    doc = json.loads(read_gz(DEVICE / fixture))
    (record,) = [c for c in doc["cases"] if (c["tool"], c["op"], c["params"]) == (tool, op, case)]
    assert record["mode"] == "test"                 # the build's own comparison with the CPU backend
    assert doc["target"]["build"]["git"]["short"] == "d99724f2"
    assert "H100" in doc["target"]["environment"]["gpu"]["devices"][0]["name"]
    return record["status"]


def test_the_mul_mat_case_passes_the_numeric_test_on_the_same_tree_and_gpu():
    assert _test_mode_status("h100-session17/ab-plain.json.gz", "racecheck", "MUL_MAT", MUL_MAT_CASE) == "OK"


def test_a_mul_mat_id_case_of_the_root_passes_the_numeric_test_on_the_same_tree_and_gpu():
    doc = json.loads(read_gz(DEVICE / "h100-session21" / "whole.json.gz"))
    root = next(r for r in doc["roots"] if r["site"] == "src/ggml-cuda/getrows.cu:127")
    smallest = root["smallest"]["params"]
    assert smallest == MUL_MAT_ID_CASE.replace("b=0", "b=1")
    assert _test_mode_status("h100-session20/whole.json.gz", "racecheck", "MUL_MAT_ID", smallest) == "OK"
