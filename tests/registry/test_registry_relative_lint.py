"""The linter on relative signatures: D5's real entry, each time with one thing about its matcher broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.registry.loader import load_registry

D5 = Path(__file__).resolve().parents[2] / "registry" / "D5.md"
SIGNATURE = D5.read_text().split("[[signature]]", 1)[1].split("```", 1)[0]


def problems_with(tmp_path: Path, old: str, new: str) -> list[str]:
    text = D5.read_text()
    assert old in SIGNATURE or old in text, old
    if old in SIGNATURE:
        text = text.replace(SIGNATURE, SIGNATURE.replace(old, new, 1))
    else:
        text = text.replace(old, new, 1)
    (tmp_path / "D5.md").write_text(text)
    # alone in its folder, D5's `related = ["D9"]` is an unknown id: not what is tested here
    return [f"{p.key}: {p.message}" for p in load_registry(tmp_path).problems if p.key != "defect.related"]


def test_d5_as_written_lints_clean(tmp_path):
    assert problems_with(tmp_path, "ratio_min = 50", "ratio_min = 50") == []


@pytest.mark.parametrize("old, new, expected", [
    ('arm = "q8_0-control"', 'arm = "q4_0-control"', "signature[0].arm: no repro step named 'q4_0-control'"),
    ('arm = "q8_0-control"', 'arm = "kvarn5"',
     "signature[0].arm: step 'kvarn5' compares with 'q8_0-control', not 'kvarn5'"),
    ('arm = "q8_0-control"\n', '', "signature[0]: a relative matcher needs `arm`, the comparison arm's step"),
    ("(?P<value>[0-9]+\\.[0-9]+)", "([0-9]+\\.[0-9]+)",
     "signature[0].pattern: has no named group `value`: write the number as (?P<value>...)"),
    ("ratio_min = 50", "ratio_min = 50\ndifference_min = 500",
     "signature[0]: a relative matcher needs exactly one of ratio_min or difference_min"),
    ("ratio_min = 50\n", "", "signature[0]: a relative matcher needs exactly one of ratio_min or difference_min"),
    ("ratio_min = 50", "ratio_min = 0", "signature[0].ratio_min: must be a finite positive number, not 0"),
    ("ratio_min = 50", "ratio_min = -2.5", "signature[0].ratio_min: must be a finite positive number, not -2.5"),
    ("ratio_min = 50", "ratio_min = inf", "signature[0].ratio_min: must be a finite number, not inf"),
    ("ratio_min = 50", "difference_min = nan", "signature[0].difference_min: must be a finite number, not nan"),
    ("ratio_min = 50", 'ratio_min = "50"', "signature[0].ratio_min: must be a number"),
    ('pick = "max"', 'pick = "median"', "signature[0].pick: 'median' is not one of max, min, first, last"),
    ('compare_with = "q8_0-control"\n', '',
     "signature[0].arm: step 'kvarn5' compares with None, not 'q8_0-control'"),
])
def test_each_broken_relative_matcher_is_one_named_problem(tmp_path, old, new, expected):
    got = problems_with(tmp_path, old, new)
    assert len(got) == 1 and got[0].startswith(expected), got


def test_a_relative_matcher_without_its_step_would_judge_the_arm_too(tmp_path):
    assert problems_with(tmp_path, 'step = "kvarn5"\n', '') == [
        "signature[0]: a relative matcher needs the step it judges (`step`)",
        "repro[0].compare_with: step 'q8_0-control' has a signature: a comparison arm is measured, not judged"]


def test_a_relative_key_on_another_matcher_type_is_refused(tmp_path):
    got = problems_with(tmp_path, 'type = "relative"', 'type = "output"')
    assert "signature[0].arm: not a key of a 'output' matcher" in got
