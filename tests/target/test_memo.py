"""The memo of slow, rarely changing inspections (environment, test-backend-ops probe)."""

from __future__ import annotations

import os

from kvdiag.target.memo import binary_key, memoised


def test_an_answer_is_computed_once_per_key(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or {"gpu": "H200"}  # noqa: E731
    assert memoised(tmp_path, "environment", "k1", compute) == {"gpu": "H200"}
    assert memoised(tmp_path, "environment", "k1", compute) == {"gpu": "H200"}
    assert len(calls) == 1
    memoised(tmp_path, "environment", "k2", compute)
    assert len(calls) == 2


def test_an_answer_not_worth_keeping_is_recomputed(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or "no gpu"  # noqa: E731
    for _ in range(2):
        memoised(tmp_path, "environment", "k", compute, keep=lambda value: value != "no gpu")
    assert len(calls) == 2


def test_a_rebuilt_binary_has_a_new_key(tmp_path):
    binary = tmp_path / "test-backend-ops"
    binary.write_text("v1")
    before = binary_key(binary)
    binary.write_text("v2 longer")
    os.utime(binary, ns=(1, 10**18))
    assert binary_key(binary) != before


def test_a_corrupt_cache_file_is_a_miss(tmp_path):
    memoised(tmp_path, "x", "k", lambda: 1)
    (next((tmp_path / "cache").iterdir())).write_bytes(b"not a pickle")
    assert memoised(tmp_path, "x", "k", lambda: 2) == 2


def test_the_memo_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KVDIAG_NO_CACHE", "1")
    calls = []
    for _ in range(2):
        memoised(tmp_path, "x", "k", lambda: calls.append(1))
    assert len(calls) == 2
    assert not (tmp_path / "cache").exists()
