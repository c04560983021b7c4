"""The real compute-sanitizer on a real GPU, through SanitizerInvocation and run_command.

Runs only where a GPU, compute-sanitizer and nvcc are present (the device machine);
skipped elsewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_checks import compile_scenario, real_sanitizer
from kvdiag.proc.runner import run_command
from kvdiag.proc.sanitizer import (
    SANITIZER_ERROR_EXITCODE,
    SanitizerInvocation,
    sanitizer_version,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def oob_program(tmp_path_factory) -> Path:
    return compile_scenario("writes_out_of_bounds.cu", tmp_path_factory.mktemp("cu"))


def test_real_version_is_parsed(tmp_path):
    version = sanitizer_version(real_sanitizer(), tmp_path)
    assert version is not None and version.count(".") >= 2


@pytest.mark.parametrize("destroy,sync", [
    ("kernel", "sync: no error"),                    # the kernel is cut short, the context lives
    ("context", "sync: unspecified launch failure"),  # the program itself then fails (exit 1) ...
])
def test_memcheck_finding_goes_to_the_log_file_and_exits_99(tmp_path, oob_program, destroy, sync):
    report = tmp_path / "memcheck.log"
    inv = SanitizerInvocation("memcheck", print_limit=0, destroy_on_device_error=destroy)
    r = run_command(inv.argv(real_sanitizer(), report, [str(oob_program)]), timeout=300,
                    log_dir=tmp_path, name="memcheck")
    text = report.read_text()
    assert "Invalid __global__ write of size 4 bytes" in text
    assert "kvdiag_oob_write" in text
    # context mode adds the failed API call and "Target application returned an error"
    assert re.search(r"ERROR SUMMARY: [1-9]\d* errors?", text)
    assert "Invalid __global__" not in r.combined_text()    # the report stays out of the output
    assert r.stdout_text() == sync + "\n"
    assert r.returncode == SANITIZER_ERROR_EXITCODE, r.describe()   # ... yet the tool exits 99


def test_kernel_filter_limits_the_check(tmp_path, oob_program):
    report = tmp_path / "50%filtered.log"            # '%' must reach the tool as '%%'
    inv = SanitizerInvocation("memcheck", kernel_filter="kvdiag_in_bounds")
    r = run_command(inv.argv(real_sanitizer(), report, [str(oob_program)]), timeout=300,
                    log_dir=tmp_path, name="filtered")
    assert "ERROR SUMMARY: 0 errors" in report.read_text()
    assert r.returncode == 0 and r.stdout_text() == "sync: no error\n"
