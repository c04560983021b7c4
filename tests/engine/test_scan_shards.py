"""`kvdiag scan --shard`: real scans of a staged case space, in shards, merged by `kvdiag merge`.

The stand-in test-backend-ops (tests/scenarios/builds/backend_ops_case_space.py) lists 9
supported cases (4 that diverge under the fake compute-sanitizer, 4 OK, 1 that dies of
another error) and 2 not supported; no GPU is needed (the target's GPU is replaced, as in
test_scan.py). The whole space is scanned once, then in 4 shards that a Slurm job array
names (`--array=1-4`: ids from 1); the merged shards must be the whole scan, case by case.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine_helpers import ALLOWED, fake_gpu
from kvdiag.cli import main
from kvdiag.controls.gate import no_sanitizer_gate
from kvdiag.shards import ENGINE_VARIABLES, case_shard
from test_scan import CRASH, DIVERGING, NOT_SUPPORTED, OK_CASES, scan_entry_body

CASES = [*DIVERGING, *OK_CASES, CRASH]
SLURM = {"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4",
         "SLURM_ARRAY_TASK_STEP": "1"}


@dataclasses.dataclass
class Staged:
    registry: Path
    build: Path
    sanitizer: Path
    root: Path

    def scan(self, *argv: str, build: Path | None = None) -> int:
        return main(["--registry", str(self.registry), "scan", "D930", "--build", str(build or self.build),
                     "--sanitizer", str(self.sanitizer), "--format", "json", *argv])


@pytest.fixture
def staged(kv, monkeypatch: pytest.MonkeyPatch) -> Staged:
    import kvdiag.engine.scan.session as session

    for names in ENGINE_VARIABLES.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    real = session.prepare_target

    def prepare(*args, **kwargs):           # the stand-in build on a GPU machine
        target = real(*args, **kwargs)
        return dataclasses.replace(target, environment=dataclasses.replace(target.environment, gpu=fake_gpu()))

    monkeypatch.setattr(session, "prepare_target", prepare)
    monkeypatch.setattr(session, "controls_gate_provider",
                        lambda home, target, log_dir: lambda tool: no_sanitizer_gate(tool) if tool is None else ALLOWED)
    kv.entry("D930", scan_entry_body(30))
    build = kv.build("backend_ops_case_space")
    (build / "case-space.txt").write_text("\n".join([*CASES, *NOT_SUPPORTED]) + "\n")
    return Staged(kv.registry_dir, build, kv.sanitizer(), kv.root)


def scan_shards(staged: Staged, monkeypatch, capsys, count: int = 4, *extra: str) -> list[Path]:
    parts = []
    for task in range(1, count + 1):
        part = staged.root / f"part-{task}-of-{count}{'-'.join(('', *extra))}.json"
        env = {**SLURM, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(count),
               "SLURM_ARRAY_TASK_MAX": str(count)}
        with monkeypatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            rc = staged.scan("--shard", "auto", "--save", str(part), "-j", "2", *extra)
        capsys.readouterr()
        assert rc in (0, 1, 4), rc
        parts.append(part)
    return parts


def test_four_shards_merge_to_the_case_set_and_verdicts_of_one_scan(staged, monkeypatch, capsys):
    """One process per case on both sides (--batch 1), so the error counts compare too: a batch
    counts the errors printed with each case, a lone case the sanitizer's summary."""
    whole = staged.root / "whole.json"
    assert staged.scan("--save", str(whole), "-j", "2", "--batch", "1") == 1
    capsys.readouterr()
    parts = scan_shards(staged, monkeypatch, capsys, 4, "--batch", "1")
    saved = [json.loads(p.read_text()) for p in parts]
    for task, part in enumerate(saved, start=1):
        assert part["format"] == "kvdiag-scan/1" and part["shard"] == f"{task}/4"
        assert part["shard_from"] == {"engine": "slurm", "variables": {**SLURM, "SLURM_ARRAY_TASK_ID": str(task)}}
        assert sorted(part["selection"]) == sorted(CASES)
        assert all(case_shard(c, 4) == task for c in part["cases"])
    # every case in exactly one shard
    dealt = [c for part in saved for c in part["cases"]]
    assert sorted(dealt) == sorted(CASES) and len(set(dealt)) == len(dealt)

    merged_path = staged.root / "merged.json"
    assert main(["merge", *map(str, reversed(parts)), "-o", str(merged_path), "--format", "json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    merged, reference = json.loads(merged_path.read_text()), json.loads(whole.read_text())
    assert printed == merged
    assert set(merged["cases"]) == set(reference["cases"]) == set(CASES)
    assert {c: v["verdict"] for c, v in merged["cases"].items()} == \
        {c: v["verdict"] for c, v in reference["cases"].items()}
    assert {c: v["error_count"] for c, v in merged["cases"].items()} == \
        {c: v["error_count"] for c, v in reference["cases"].items()}
    assert merged["counts"] == reference["counts"] and merged["counts"]["confirmed"] == len(DIVERGING)
    assert merged["not_supported"] == reference["not_supported"] and merged["not_run"] == []
    site = lambda rows: {r["site"]: (r["cases"], r["errors"], r["printed"]) for r in rows}  # noqa: E731
    assert site(merged["sites"]) == site(reference["sites"])
    assert merged["instantiations"] == reference["instantiations"]
    assert merged["shard"] is None and [p["shard"] for p in merged["merged_from"]] == ["1/4", "2/4", "3/4", "4/4"]
    assert merged["range"] == reference["range"] and reference["range"]["status"] in ("none", "unknown")

    assert main(["merge", *map(str, parts), "-o", str(staged.root / "merged.txt.json")]) == 1
    text = capsys.readouterr().out
    assert "D930 scan of FLASH_ATTN_EXT /hsk=256/: 9 supported case(s)" in text
    assert f"range: {reference['range']['summary']}" in text
    assert "merged from 4 shard(s): 1/4" in text and f"merged: {staged.root / 'merged.txt.json'}" in text


def test_a_case_s_shard_does_not_depend_on_the_workers_or_batches(staged, monkeypatch, capsys):
    one, = scan_shards(staged, monkeypatch, capsys, 1)
    many = scan_shards(staged, monkeypatch, capsys, 2)
    again = staged.root / "again.json"
    monkeypatch.setenv("CI_NODE_INDEX", "2")
    monkeypatch.setenv("CI_NODE_TOTAL", "2")
    staged.scan("--shard", "auto", "--save", str(again), "-j", "1", "--batch", "1")
    capsys.readouterr()
    assert set(json.loads(again.read_text())["cases"]) == set(json.loads(many[1].read_text())["cases"])
    assert set(json.loads(one.read_text())["cases"]) == set(CASES)


def test_merge_refuses_parts_that_are_not_one_scan(staged, monkeypatch, capsys, kv):
    parts = scan_shards(staged, monkeypatch, capsys)
    out = str(staged.root / "m.json")

    def refused(*files) -> str:
        assert main(["merge", *map(str, files), "-o", out]) == 64
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("kvdiag: ")
        return err

    assert "incomplete: shard(s) 2/4, 4/4 missing" in refused(parts[0], parts[2])
    assert "shard(s) 3/4 given more than once" in refused(*parts, parts[2])
    halves = scan_shards(staged, monkeypatch, capsys, 2)
    assert "the shards split the scan differently: 1/4, 2/4, 3/4, 2/2" in refused(*parts[:3], halves[1])
    limited = scan_shards(staged, monkeypatch, capsys, 4, "--limit", "5")
    assert "come from different selections of cases" in refused(*parts[:3], limited[3])
    other_build = kv.build("backend_ops_case_space", cache_extra={"CMAKE_CUDA_FLAGS:STRING": "-lineinfo -G"})
    (other_build / "case-space.txt").write_text((staged.build / "case-space.txt").read_text())
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    for name, value in SLURM.items():
        monkeypatch.setenv(name, value)
    elsewhere = staged.root / "elsewhere.json"
    staged.scan("--shard", "auto", "--save", str(elsewhere), build=other_build)
    capsys.readouterr()
    assert "ran against different targets (cuda_flags: '-lineinfo' vs '-lineinfo -G')" in refused(*parts[:3],
                                                                                                   elsewhere)
    sweep = staged.root / "sweep.json"
    sweep.write_text(json.dumps({"format": "kvdiag-sweep/2", "outcomes": [], "shard": "4/4"}))
    assert "not both" in refused(*parts[:3], sweep)
