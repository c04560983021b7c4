"""The saved sweep format, shards and their merge."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from store_fixtures import TARGET, sweep_of
from kvdiag.errors import DataError, UsageError
from kvdiag.store.sweeps import (SWEEP_FORMAT, Sweep, entry_sort_key, load_sweep, merge_sweeps, parse_shard,
                                 save_sweep, shard_ids, target_identity, target_summary)

IDS = ["D1", "D2", "D3", "D4", "D5", "D10", "D11"]


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    sweep = sweep_of(IDS, shard=None)
    path = save_sweep(sweep, tmp_path / "deep" / "sweep.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == SWEEP_FORMAT and data["outcomes"][1]["title"] == "title D2"
    assert load_sweep(path) == sweep
    assert load_sweep(path).counts() == {"confirmed": 2, "not-reproduced": 2, "not-applicable": 1, "skipped": 1,
                                         "inconclusive": 1, "error": 0}


@pytest.mark.parametrize("content, message", [
    ("{", "not a sweep: Expecting property name"),
    ("[]", "not a kvdiag sweep"),
    ('{"format": "other"}', "not a kvdiag sweep"),
    (f'{{"format": "{SWEEP_FORMAT}", "outcomes": [{{"entry": "D1"}}]}}', "each with 'entry' and 'verdict'"),
])
def test_bad_files_are_data_errors_and_absent_ones_usage_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        load_sweep(path)
    with pytest.raises(UsageError, match="no such sweep file"):
        load_sweep(tmp_path / "absent.json")


def test_natural_id_order() -> None:
    assert sorted(["D10", "D2", "D1", "X", "D11"], key=entry_sort_key) == ["D1", "D2", "D10", "D11", "X"]


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 3 / 3 ", (3, 3))])
def test_parse_shard(text: str, expected) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1", "", "1/2/3"])
def test_parse_shard_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_shard(text)


def test_shards_are_round_robin_and_cover_every_id_once() -> None:
    ids = [f"D{i}" for i in range(1, 14)]
    assert shard_ids(ids, "1/3") == ["D1", "D4", "D7", "D10", "D13"]
    assert shard_ids(ids, "2/3") == ["D2", "D5", "D8", "D11"]
    for n in range(1, 16):
        parts = [shard_ids(list(reversed(ids)), f"{i}/{n}") for i in range(1, n + 1)]
        flat = [x for p in parts for x in p]
        assert sorted(flat, key=entry_sort_key) == ids and len(flat) == len(set(flat))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def shards(n: int, **kw) -> list[Sweep]:
    return [sweep_of(None, shard=f"{i}/{n}", selection=IDS, **kw) for i in range(1, n + 1)]


def test_merge_of_shards_equals_the_unsharded_sweep() -> None:
    whole = sweep_of(IDS)
    for n in (1, 2, 3, 7):
        parts = shards(n)
        merged = merge_sweeps(list(reversed(parts)))
        assert merged.ids == whole.ids == IDS
        assert [o.verdict for o in merged.outcomes] == [o.verdict for o in whole.outcomes]
        assert merged.outcomes == whole.outcomes
        assert merged.shard is None and merged.selection == IDS and not merged.interrupted


def test_merge_spans_the_shards_times() -> None:
    a = sweep_of(None, shard="1/2", selection=IDS, started_at="2026-11-29T10:00:00+00:00", wall_s=100)
    b = sweep_of(None, shard="2/2", selection=IDS, started_at="2026-11-29T10:01:00+00:00", wall_s=100)
    merged = merge_sweeps([b, a])
    assert merged.started_at == "2026-11-29T10:00:00+00:00" and merged.wall_s == pytest.approx(160)


def test_merge_accepts_the_same_build_on_an_identical_machine() -> None:
    other = copy.deepcopy(TARGET)
    other["environment"]["host"]["hostname"] = "box-b"
    other["build"]["build_dir"] = "/srv/ci/build"
    parts = shards(2)
    parts[1] = sweep_of(None, shard="2/2", selection=IDS, target=other)
    assert merge_sweeps(parts).ids == IDS


@pytest.mark.parametrize("change, message", [
    (lambda t: t["build"]["git"].update(commit="0123abcd"), "different targets .*commit"),
    (lambda t: t["build"]["git"].update(dirty=True), "different targets .*dirty"),
    (lambda t: t["environment"].update(key="ffff"), "different targets .*machine_key"),
    (lambda t: t["build"].update(cuda_flags=""), "different targets .*cuda_flags"),
])
def test_merge_refuses_shards_of_different_targets(change, message) -> None:
    other = copy.deepcopy(TARGET)
    change(other)
    parts = shards(2)
    parts[1] = sweep_of(None, shard="2/2", selection=IDS, target=other)
    with pytest.raises(UsageError, match=message):
        merge_sweeps(parts)


def test_merge_refusals() -> None:
    with pytest.raises(UsageError, match="nothing to merge"):
        merge_sweeps([])
    with pytest.raises(UsageError, match="is not a shard"):
        merge_sweeps([sweep_of(IDS)])
    with pytest.raises(UsageError, match=r"shard\(s\) 3/3 missing"):
        merge_sweeps(shards(3)[:2])
    with pytest.raises(UsageError, match="given more than once"):
        merge_sweeps(shards(2) + shards(2)[:1])
    with pytest.raises(UsageError, match="split the selection differently"):
        merge_sweeps(shards(2)[:1] + shards(3)[1:])
    with pytest.raises(UsageError, match="different selections"):
        merge_sweeps([shards(2)[0], sweep_of(None, shard="2/2", selection=IDS + ["D12"])])
    overlap = shards(2)
    overlap[1] = sweep_of(["D2", "D1"], shard="2/2", selection=IDS)
    with pytest.raises(UsageError, match="D1 is in both shard 1/2 and shard 2/2"):
        merge_sweeps(overlap)
    short = shards(2)
    short[1] = sweep_of(short[1].ids[:-1], shard="2/2", selection=IDS)
    with pytest.raises(UsageError, match="incomplete: no shard has an outcome for D10"):
        merge_sweeps(short)
    cut = shards(2)
    cut[0] = sweep_of(cut[0].ids, shard="1/2", selection=IDS, interrupted=True)
    with pytest.raises(UsageError, match="were interrupted"):
        merge_sweeps(cut)


def test_target_identity_and_summary(target: dict) -> None:
    assert target_identity(target)["commit"] == "d99724f2a0c6"
    assert "hostname" not in json.dumps(target_identity(target))
    t = target_summary(target)
    assert (t.gpu_name, t.cc, t.driver, t.sanitizer_version, t.commit_label) == \
        ("NVIDIA H200", "9.0", "580.159.04", "2025.3.1", "d99724f2")
    assert t.staleness == "current with its sources (ninja -n; its control passed on this machine)"
    empty = target_summary({})
    assert empty.gpu_label == "no GPU" and empty.commit_label == "unknown commit" and empty.staleness == "no build"
    # one record, the one D13's verdict reads: no proof is no "current" (a record older than the proof says so)
    unproven = {**target["build"]["staleness"], "proof": None}
    assert target_summary({"build": {**target["build"], "staleness": unproven}}).staleness == \
        "not checked: no staleness control proved the dry run on this machine"
    old = {k: v for k, v in target["build"]["staleness"].items() if k != "proof"}
    assert target_summary({"build": {**target["build"], "staleness": old}}).staleness == \
        "current with its sources (ninja -n; recorded before its control was kept)"
    refused = {"checked": False, "stale": None, "tool": "ninja -n", "detail": "the dry run found nothing to rebuild "
               "(ninja: no work to do), but the ninja -n control could not build its staged project"}
    assert target_summary({"build": {**target["build"], "staleness": refused}}).staleness == \
        f"not checked: {refused['detail']}"
    target["build"]["git"].update(dirty=True, dirty_count=3)
    target["build"]["staleness"].update(stale=True, pending_count=12)
    t = target_summary(target)
    assert t.commit_label == "d99724f2 +3 uncommitted" and t.staleness.startswith("STALE: 12 build step(s)")
