"""Issue 28: numbers and id lists are checked before anything runs.

`--timeout nan` was accepted and turned every deadline off (click's FloatRange
compares, and every comparison with NaN is false); `--step-budget inf` did the same;
`--only ,` selected nothing, which meant every entry. Each is now a usage error:
exit 64, one line naming the option, and no run recorded.
"""

from __future__ import annotations

import pytest

from faults_helpers import Faults, one_line

BAD_TIMES = ["nan", "inf", "-inf", "0", "-5"]


def _time_args(kv: Faults, command: str, value: str) -> list:
    build = kv.build("throws_healthily.sh")
    return {
        "run --timeout": ["run", "D12", "--build", build, "--no-staleness", "--timeout", value],
        "sweep --step-budget": ["sweep", "--only", "D12", "--build", build, "--no-staleness", "--step-budget", value],
        "verify --build-timeout": ["verify", "D12", "--source", kv.root, "--probe", "any", "--build-timeout", value],
        "bisect --timeout": ["bisect", "D12", "--source", kv.root, "--good", "a", "--bad", "b", "--timeout", value],
    }[command]


@pytest.mark.parametrize("value", BAD_TIMES)
@pytest.mark.parametrize("command", ["run --timeout", "sweep --step-budget", "verify --build-timeout",
                                     "bisect --timeout"])
def test_a_time_that_is_not_finite_and_positive_is_a_usage_error(kv: Faults, command, value):
    code, out, err = kv.cli(*_time_args(kv, command, value))
    assert code == 64 and out == "", (code, out, err)
    option = command.split()[1]
    line = one_line(err)
    assert line.startswith(f"kvdiag: {option} {value}: a time must be a finite number of seconds, "), line
    assert len(err.strip().splitlines()) == 1, err
    assert kv.runs() == []


@pytest.mark.parametrize("args, line", [
    (["runs", "--limit", "nan"], "kvdiag: --limit: 'nan' is not a whole number"),
    (["runs", "--limit", "0"], "kvdiag: --limit 0: must be a whole number from 1 to 10000"),
    (["history", "D12", "--limit", "-1"], "kvdiag: --limit -1: must be a whole number from 1 to 100000"),
    (["model", "synth", "--head-dim", "64", "--n-head", "2", "--n-head-kv", "2", "--seed", "-1", "-o", "OUT"],
     "kvdiag: --seed -1: must be a whole number at least 0"),
    (["model", "synth", "--head-dim", "nan", "--n-head", "2", "--n-head-kv", "2", "-o", "OUT"],
     "kvdiag: --head-dim: 'nan' is not a whole number"),
    (["discover", "--build", "OUT", "--racecheck-workers", "-1"],
     "kvdiag: --racecheck-workers -1: must be a whole number from 0 to 64"),
], ids=["runs-limit-nan", "runs-limit-0", "history-limit-negative", "synth-seed-negative", "synth-head-dim-nan",
        "discover-racecheck-workers-negative"])
def test_a_count_out_of_range_is_one_line_and_64(kv: Faults, args, line):
    code, out, err = kv.cli(*[str(kv.root / "m.gguf") if a == "OUT" else a for a in args])
    assert code == 64 and out == "" and err.strip() == line, (code, out, err)
    assert not (kv.root / "m.gguf").exists()


@pytest.mark.parametrize("option, value", [
    ("--only", ","), ("--only", ""), ("--only", " , "), ("--only", "D12,,D13"), ("--only", "D12,"),
    ("--exclude", ","), ("--devices", ","), ("--devices", ""),
])
def test_an_empty_id_list_is_a_usage_error_not_every_entry(kv: Faults, option, value):
    build = kv.build("throws_healthily.sh")
    code, out, err = kv.cli("sweep", "--build", build, "--no-staleness", "--quiet", option, value)
    assert code == 64 and out == "", (code, out, err)
    what = "no id" if not value.strip(" ,") else "an empty id"
    assert one_line(err).startswith(f"kvdiag: {option} {value!r}: {what} in the list (give ids separated by commas")
    assert kv.runs() == []


def test_scan_devices_empty_is_a_usage_error(kv: Faults):
    build = kv.build("throws_healthily.sh")
    code, _, err = kv.cli("scan", "D2", "--build", build, "--devices", "")
    assert code == 64 and one_line(err).startswith("kvdiag: --devices '': no id in the list")
    assert kv.runs() == []


@pytest.mark.parametrize("line, problem", [
    ("expected_seconds = nan", "repro[0].expected_seconds: must be a finite number, not nan"),
    ("expected_seconds = inf", "repro[0].expected_seconds: must be a finite number, not inf"),
    ("expected_seconds = 0", "repro[0].expected_seconds: a time must be above 0 seconds (got 0)"),
    ("timeout = 0", "repro[0].timeout: a time must be above 0 seconds (got 0)"),
])
def test_a_registry_time_that_is_not_finite_and_positive_fails_lint(kv: Faults, line, problem):
    reg = kv.registry_copy("D12")
    text = (reg / "D12.md").read_text()
    key = line.split(" = ")[0]
    was = next(ln for ln in text.splitlines() if ln.startswith(f"{key} = "))
    (reg / "D12.md").write_text(text.replace(was + "\n", line + "\n", 1))
    code, out, _ = kv.cli("--registry", reg, "registry", "lint")
    assert code == 65 and f"D12.md: {problem}" in out.splitlines(), out
