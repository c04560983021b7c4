"""Shared text helpers: what every parser relies on before matching."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdiag.parse.text import clean_line, iter_lines, jsonable, split_top_level, strip_ansi, to_int


def test_strip_ansi():
    assert strip_ansi("\x1b[1;32mOK\x1b[0m") == "OK"
    assert strip_ansi("a\x1b]0;title\x07b") == "ab"
    assert strip_ansi("plain") == "plain"


def test_clean_line_and_iter_lines():
    assert clean_line("progress 10%\rdone\r\n") == "done"
    assert list(iter_lines("a\r\n\x1b[1;31mFAIL\x1b[0m\n")) == ["a", "FAIL", ""]
    assert list(iter_lines(["x\n", "y"])) == ["x", "y"]


def test_split_top_level():
    assert split_top_level("a=[1,2],b=(int)3,c=<x, y>") == ("a=[1,2]", "b=(int)3", "c=<x, y>")
    assert split_top_level("") == ()
    assert split_top_level("a,") == ("a", "")


def test_to_int():
    assert to_int("1,024") == 1024
    assert to_int(None) is None
    assert to_int("x") is None


def test_jsonable():
    @dataclass(frozen=True)
    class Inner:
        v: float

    @dataclass(frozen=True)
    class Outer:
        items: tuple
        inner: Inner

    assert jsonable(Outer((1, (2, 3)), Inner(math.inf))) == {"items": [1, [2, 3]], "inner": {"v": "inf"}}
