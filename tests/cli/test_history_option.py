"""``kvdiag --history REPO``: the clone a tree without usable git history is placed in (engine.verdict.placement)."""

from __future__ import annotations

import os

from kvdiag.cli import main
from kvdiag.workspace.history import HISTORY_ENV, TreeHistory


def test_a_history_that_is_not_a_folder_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    assert main(["--history", str(tmp_path / "nowhere"), "list"]) == 64
    assert "--history" in capsys.readouterr().err
    assert HISTORY_ENV not in os.environ


def test_the_named_history_reaches_every_trees_history(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    clone = tmp_path / "ggml"
    clone.mkdir()
    assert main(["--history", str(clone), "list"]) == 0
    capsys.readouterr()
    assert TreeHistory(tmp_path / "tree", tmp_path).reference == clone.resolve()
    monkeypatch.delenv(HISTORY_ENV)
    assert TreeHistory(tmp_path / "tree", tmp_path).reference is None
