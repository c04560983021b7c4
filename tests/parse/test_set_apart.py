"""Which sanitizer findings are not a different finding (kvdiag.parse.set_apart)."""

from __future__ import annotations

from kvdiag.parse.sanitizer import parse_sanitizer
from kvdiag.parse.set_apart import set_apart
from kvdiag.registry.entry import Matcher

M = "========= "


def race(kernel: str, site: str, severity: str = "Error") -> str:
    return (f"{M}{severity}: Race reported between Write access at void {kernel}<(int)16>(const float *)+0x10 "
            f"in {site}\n{M}    and Read access at void {kernel}<(int)16>(const float *)+0x20 in {site} [64 hazards]\n"
            f"{M}\n")


def report(*blocks: str, summary: str = ""):
    return parse_sanitizer(f"{M}COMPUTE-SANITIZER\n" + "".join(blocks) + summary, tool="racecheck")


D17 = ("D17", (Matcher(type="sanitizer", tool="racecheck", kind="race-hazard", site=r"ssm-scan\.cu:\d+",
                       kernel="^ssm_scan_f32_group(<|$)"),))


def test_a_related_entrys_finding_is_set_apart_and_named():
    r = report(race("ssm_scan_f32_group", "ssm-scan.cu:178"),
               summary=f"{M}RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    apart = set_apart(r, (D17,))
    assert not apart.different and [len(v) for v in apart.by_entry.values()] == [1]
    assert apart.note() == "the other findings: 1 of D17's signature (ssm-scan.cu:178)"


def test_an_unrelated_finding_stays_different_whatever_else_is_set_apart():
    r = report(race("ssm_scan_f32_group", "ssm-scan.cu:178"), race("soft_max_f32", "softmax.cu:90"))
    apart = set_apart(r, (D17,))
    assert apart.different and [f.kernel_name for f in apart.rest] == ["soft_max_f32"]


def test_racecheck_warnings_are_set_apart_but_not_a_memcheck_finding():
    r = report(race("cub::detail::uninitialized_copy_single", "uninitialized_copy.cuh:60", "Warning"))
    apart = set_apart(r)
    assert not apart.different and apart.note() == "the other findings: 1 racecheck warning(s)"


def test_without_neighbours_every_error_is_different():
    apart = set_apart(report(race("ssm_scan_f32_group", "ssm-scan.cu:178")))
    assert apart.different and apart.note() == ""


def test_errors_counted_and_not_printed_are_different():
    r = report(race("ssm_scan_f32_group", "ssm-scan.cu:178"),
               summary=f"{M}RACECHECK SUMMARY: 5 hazards displayed (5 errors, 0 warnings)\n")
    from dataclasses import replace

    assert set_apart(replace(r, not_printed=4), (D17,)).different
