"""A registry file before it is an entry: its TOML and body, and what is wrong with it.

The loader and the linter both speak these; keeping them apart from both is
what lets the loader call the linter without the linter importing the loader.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FRONT_MATTER = re.compile(r"\A\s*```toml[ \t]*\n(?P<toml>.*?)\n```[ \t]*\n?(?P<body>.*)\Z", re.S)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file, reported as ``file: key: message``."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}"


@dataclass(frozen=True)
class RawEntry:
    """A file split into its parsed TOML and its Markdown body."""

    path: Path
    data: dict[str, Any]
    body: str


def read_raw(path: Path) -> RawEntry:
    """Split a file into TOML data and body; raises ValueError with a precise message."""
    text = path.read_text(encoding="utf-8")
    match = FRONT_MATTER.match(text)
    if not match:
        raise ValueError("no ```toml front matter at the top of the file")
    try:
        data = tomllib.loads(match.group("toml"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"TOML does not parse: {exc}") from None
    return RawEntry(path=path, data=data, body=match.group("body").strip() + "\n")
